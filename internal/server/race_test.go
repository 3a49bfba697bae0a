//go:build race

package server

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are not meaningful under it.
const raceEnabled = true

// The flood test's sizes under -race, which is ~10x slower: enough to
// cross several log intervals, within CI's time.
const floodCalls, floodProxied = 20_000, 2_000
