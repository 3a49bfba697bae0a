package ratelimit

import (
	"context"
	"time"
)

// Store decides requests against per-key GCRA state. LocalStore keeps the state in
// process; a Redis-backed store shares it across instances. Implementations must make
// the same decision as Limit's GCRA for the same sequence of requests.
//
// Allow counts n units (n = 0 only reports the state) of key at time now under lim. It
// returns an error with a rejecting Decision when lim is invalid or n is outside 0..lim.Burst
// (RetryAfter Never), and, for a remote store, when the state could not be reached; the
// caller decides what a store failure means (the cluster store falls back to a local share).
type Store interface {
	Allow(ctx context.Context, key string, lim Limit, now time.Time, n int) (Decision, error)
}

var _ Store = (*LocalStore)(nil)
