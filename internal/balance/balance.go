// Package balance chooses which backend of an app serves a request.
// Each policy is small and knows nothing of HTTP; the forwarder calls Pick.
//
// Picker (RoundRobin, Weighted) is the load-blind interface. Balancer is the
// load-aware one: a Set holds the live state of an app's backends (in
// flight, EWMA latency, health; carried across reloads by NewSet), and P2C,
// Hash and Sequence (a Picker over a Set) pick from it and learn from Done.
// Set.Shares, Window and Imbalance measure the distribution.
package balance

import (
	"sync/atomic"
	"time"
)

// Picker chooses the index of the backend for the next request.
// Implementations are safe for concurrent use. It knows nothing of load or
// health; see Balancer for the policies that do.
type Picker interface {
	Pick() int
}

// NoBackend is what Balancer.Pick returns when no backend is healthy; the
// caller answers 503 with Levee-Reject: no-backend.
const NoBackend = -1

// Balancer picks among the healthy backends of a Set and learns from the
// outcome. Pick counts the request in flight on the chosen backend (and in
// its request count) before returning; the caller must call Done exactly
// once with the same index when the response ends, on the same Balancer.
// key is the request's hash key (header, cookie or client IP) for the hash
// policy and is ignored by the others. Implementations are safe for
// concurrent use and do not allocate.
type Balancer interface {
	Pick(key string, now time.Time) int
	Done(i int, o Outcome, latency time.Duration, now time.Time)
	Set() *Set
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
