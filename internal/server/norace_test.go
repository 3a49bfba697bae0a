//go:build !race

package server

const raceEnabled = false

// floodCalls is how many failing upstream calls TestFailureFloodLogsAreBounded
// makes in process, and floodProxied how many through a real listener.
const floodCalls, floodProxied = 1_000_000, 50_000
