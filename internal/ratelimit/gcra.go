package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit is a GCRA limit: one request per Interval on average, and up to Burst at once.
// Build it from a config.Rate as Limit{Interval: rate.Interval(), Burst: burst}.
//
// The zero Limit is invalid, and an invalid Limit rejects every request (see Validate).
type Limit struct {
	Interval time.Duration // T, the emission interval: 1/rate; > 0
	Burst    int           // B, the requests admitted at once by an idle key; ≥ 1
}

// MaxDepth bounds Burst·Interval, the time an idle bucket holds, so that the arithmetic
// on nanosecond timestamps cannot overflow.
const MaxDepth = time.Duration(1 << 55) // about 417 days

// Never is the RetryAfter of a request that can never conform: more units than the burst,
// or an invalid Limit.
const Never = time.Duration(math.MaxInt64)

// Errors returned by Store.Allow; the Decision that goes with them rejects the request.
var (
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	ErrInvalidN     = errors.New("ratelimit: units out of range 0..burst")
)

// Validate reports whether l can be enforced: Interval > 0, Burst ≥ 1, Burst·Interval ≤ MaxDepth.
func (l Limit) Validate() error {
	switch {
	case l.Interval <= 0:
		return fmt.Errorf("%w: interval %v must be > 0", ErrInvalidLimit, l.Interval)
	case l.Burst < 1:
		return fmt.Errorf("%w: burst %d must be ≥ 1", ErrInvalidLimit, l.Burst)
	case int64(l.Burst) > int64(MaxDepth)/int64(l.Interval):
		return fmt.Errorf("%w: burst %d × interval %v exceeds %v", ErrInvalidLimit, l.Burst, l.Interval, MaxDepth)
	}
	return nil
}

func (l Limit) valid() bool {
	return l.Interval > 0 && l.Burst >= 1 && int64(l.Burst) <= int64(MaxDepth)/int64(l.Interval)
}

// Decision is the outcome of one request under a Limit. It is a value; making one allocates
// nothing.
type Decision struct {
	// Allowed reports whether the request conformed and was counted.
	Allowed bool
	// RetryAfter is 0 when Allowed; otherwise the exact time until the same request would
	// conform (Never if it never can).
	RetryAfter time.Duration
	// Remaining is how many single requests would be admitted now, after this decision.
	Remaining int
	// Reset is the time until the bucket is full again (Remaining = Burst), after this decision.
	Reset time.Duration
}

// decide applies GCRA to a key whose state is tat, for n units at time now (both in
// nanoseconds on one time line). It returns the new TAT (tat itself unless the request is
// admitted with n > 0) and the Decision. l must be valid and 0 ≤ n ≤ l.Burst; n = 0 asks
// for the state without counting anything.
func (l Limit) decide(tat, now int64, n int) (int64, Decision) {
	t := int64(l.Interval)
	depth := int64(l.Burst) * t // B·T = τ + T
	base := max(tat, now)
	next := base + int64(n)*t
	if next-now > depth {
		return tat, Decision{
			RetryAfter: time.Duration(next - depth - now),
			Remaining:  int(max(now+depth-base, 0) / t), // < 0 only after the limit shrank
			Reset:      time.Duration(base - now),
		}
	}
	if n == 0 {
		next = tat // a query changes nothing
	}
	return next, Decision{
		Allowed:   true,
		Remaining: int((now + depth - max(next, now)) / t),
		Reset:     time.Duration(max(next, now) - now),
	}
}

// reject is the Decision for a request that can never conform.
var reject = Decision{RetryAfter: Never}
