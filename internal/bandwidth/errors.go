package bandwidth

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrTooSlow is matched (errors.Is) by every *TooSlowError: the transfer would have
	// waited longer than MaxDelay for its next chunk and must be cut.
	ErrTooSlow = errors.New("bandwidth: transfer too slow")
	// ErrInvalidN is returned by ReserveAt for a byte count outside 1..Chunk.
	ErrInvalidN = errors.New("bandwidth: bytes out of range 1..chunk")
)

// TooSlowError is the typed form of ErrTooSlow. The reservation it refused was not made.
type TooSlowError struct {
	Limit    string        // Options.Name of the limiter
	Wait     time.Duration // the wait the next chunk would have needed
	MaxDelay time.Duration // the limiter's MaxDelay
}

func (e *TooSlowError) Error() string {
	return fmt.Sprintf("bandwidth: limit %q: next chunk would wait %v, over max delay %v", e.Limit, e.Wait, e.MaxDelay)
}

// Is reports whether target is ErrTooSlow.
func (e *TooSlowError) Is(target error) bool { return target == ErrTooSlow }

// deadlineError is returned, without reserving, when the wait would outlast ctx's deadline.
type deadlineError struct {
	limit string
	wait  time.Duration
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("bandwidth: limit %q: wait %v would pass the context deadline", e.limit, e.wait)
}

func (e *deadlineError) Unwrap() error { return context.DeadlineExceeded }
