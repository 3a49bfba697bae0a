// Package balance chooses which backend of an app serves a request.
// Each policy is small and knows nothing of HTTP; the forwarder calls Pick.
package balance

import "sync/atomic"

// Picker chooses the index of the backend for the next request.
// Implementations are safe for concurrent use.
type Picker interface {
	Pick() int
}

// RoundRobin cycles through n backends in order. Safe for concurrent use.
type RoundRobin struct {
	next atomic.Uint64
	n    uint64
}

var _ Picker = (*RoundRobin)(nil)

// NewRoundRobin returns a round robin over n ≥ 1 backends.
func NewRoundRobin(n int) *RoundRobin {
	return &RoundRobin{n: uint64(max(n, 1))}
}

// Pick returns 0, 1, ..., n-1, 0, ...
func (r *RoundRobin) Pick() int {
	return int((r.next.Add(1) - 1) % r.n)
}
