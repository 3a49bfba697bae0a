package limit

import "time"

// Algorithm computes a concurrency limit from completed requests.
//
// Implementations are not safe for concurrent use: the caller serialises calls, for example
// under its limiter's mutex.
type Algorithm interface {
	// Observe records one completed request: now is when it completed, rtt how long it took,
	// inflight how many requests were in flight when it was admitted (itself included), and
	// dropped whether it failed for a reason that carries no latency information (a timeout or
	// a rejection by the backend). It must not allocate.
	Observe(now time.Time, rtt time.Duration, inflight int, dropped bool)
	// Limit returns the current concurrency limit, always within the configured bounds.
	Limit() int
}

var _ Algorithm = (*Gradient)(nil)
