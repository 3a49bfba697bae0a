//go:build race

package main

// raceEnabled builds the levee binary under test with -race too.
const raceEnabled = true
