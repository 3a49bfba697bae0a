//go:build race

package server

// The proxied flood's size under -race, which is ~10x slower: enough to
// cross several log intervals, within CI's time.
const floodProxied = 2_000
