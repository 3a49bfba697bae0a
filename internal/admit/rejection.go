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
	// Under overload this includes requests that waited beyond the short wait.
	QueueTimeout Reason = "queue-timeout"
	// Shed: the queue is overloaded and the request is Sheddable, or a
	// queued request was displaced from a full queue by a higher class.
	Shed Reason = "shed"
	// ClientShare: the app is at its concurrency limit and the client
	// already holds or waits for its fair share of the slots.
	ClientShare Reason = "client-share"
)

// Reasons are all the reasons this package gives, in the order above.
var Reasons = [...]Reason{QueueFull, QueueTimeout, Shed, ClientShare}

// Rejection is a request refused by a limit. RetryAfter is a hint for the
// client (the Retry-After header): never zero for this package's reasons,
// zero for a refusal that the same request would get again (the public
// admission package's BatchItems). Rejections returned by this package may
// be shared between requests: treat them as read-only.
//
// It is also the public admission.Rejection (a type alias), so a refusal
// of levee's limiter and one of a service's admission.Budget are one type.
type Rejection struct {
	Reason     Reason
	RetryAfter time.Duration
}

// Error returns "admit: rejected (REASON), retry after D", without the
// retry hint when RetryAfter is zero.
func (r *Rejection) Error() string {
	if r.RetryAfter <= 0 {
		return fmt.Sprintf("admit: rejected (%s)", r.Reason)
	}
	return fmt.Sprintf("admit: rejected (%s), retry after %s", r.Reason, r.RetryAfter)
}
