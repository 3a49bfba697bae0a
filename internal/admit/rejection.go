// Package admit decides whether a request may proceed to a backend now, later
// (after a bounded wait) or not at all. It knows nothing of HTTP: a refusal is
// a *Rejection, which only the HTTP edge turns into a status code.
package admit

import (
	"fmt"
	"time"
)

// Reason names the limit that refused a request. It is the value of the
// Levee-Reject response header and of the reason label on metrics.
type Reason string

// The reasons this package gives.
const (
	// QueueFull: the app is at its concurrency limit and its wait queue is full.
	QueueFull Reason = "queue-full"
	// QueueTimeout: the request waited max_wait without getting a slot.
	QueueTimeout Reason = "queue-timeout"
)

// Rejection is a request refused by a limit. RetryAfter is a hint for the
// client (the Retry-After header), never zero. Rejections returned by this
// package may be shared between requests: treat them as read-only.
type Rejection struct {
	Reason     Reason
	RetryAfter time.Duration
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("admit: rejected (%s), retry after %s", r.Reason, r.RetryAfter)
}
