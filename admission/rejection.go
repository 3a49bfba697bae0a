package admission

import (
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

// Reason names the limit that refused a request or a task. It is the value
// levee sends in its Levee-Reject response header and counts in
// levee_rejected_total{reason}, so a service using this package and the proxy
// speak of their refusals in the same words.
type Reason string

// Rejection is a request or task refused by a limit. Rejections returned
// by this package may be shared between callers: treat them as read-only.
// Find one in an error with errors.As:
//
//	var rej *admission.Rejection
//	if errors.As(err, &rej) { ... rej.Reason ... }
type Rejection struct {
	Reason Reason // which limit refused
	// RetryAfter is a hint for the client (Retry-After); 0: retrying the
	// same request cannot help.
	RetryAfter time.Duration
}

// Error returns "admission: rejected (REASON)", with ", retry after D"
// when RetryAfter is set.
func (r *Rejection) Error() string {
	if r.RetryAfter == 0 {
		return fmt.Sprintf("admission: rejected (%s)", r.Reason)
	}
	return fmt.Sprintf("admission: rejected (%s), retry after %s", r.Reason, r.RetryAfter)
}

// The reasons, spelled as levee spells them: each is the proxy's own
// constant, so the words have one definition.
const (
	// QueueFull: at the concurrency limit, and the wait queue is full (levee: 503).
	QueueFull Reason = Reason(admit.QueueFull)
	// QueueTimeout: the request waited its max wait without getting a slot (levee: 503).
	QueueTimeout Reason = Reason(admit.QueueTimeout)
	// Shed: the queue is overloaded and the request is sheddable, or it was
	// displaced by a request of a higher class (levee: 503).
	Shed Reason = Reason(admit.Shed)
	// ClientShare: at the concurrency limit, and the client already holds or
	// waits for its fair share of the slots (levee: 503).
	ClientShare Reason = Reason(admit.ClientShare)
	// BatchItems: a batch holds more items than allowed (levee: 422, for a
	// JSON batch field counted by Limits.Batch). A Group made WithMaxItems
	// refuses with it, RetryAfter 0: the same batch is refused again.
	BatchItems Reason = Reason(shape.BatchItems)
	// BatchJSON: the body of a request with Limits.Batch is not valid JSON
	// (levee: 400); BatchShape: it is JSON, but not of a shape whose items
	// can be counted (levee: 422).
	BatchJSON  Reason = Reason(shape.BatchJSON)
	BatchShape Reason = Reason(shape.BatchShape)
	// Rate: over Limits.Rate; ClientRate: over Limits.Client.Rate (levee:
	// 429, with RateLimit and RateLimit-Policy).
	Rate       Reason = Reason(reply.Rate)
	ClientRate Reason = Reason(reply.ClientRate)
	// Body: the body is over Limits.Body (levee: 413).
	Body Reason = Reason(reply.Body)
	// URLLength, QueryValues: the request target is over Limits.URLLength,
	// or has more than Limits.QueryValues parameters (levee: 414).
	URLLength   Reason = Reason(shape.URLLength)
	QueryValues Reason = Reason(shape.QueryValues)
	// HeaderCount, HeaderBytes: the header fields are over
	// Limits.HeaderCount or Limits.HeaderBytes (levee: 431).
	HeaderCount Reason = Reason(shape.HeaderCount)
	HeaderBytes Reason = Reason(shape.HeaderBytes)
)

// errBody is the refusal of a body over Limits.Body, shared: a body read
// refused for its size allocates nothing.
var errBody = &Rejection{Reason: Body}

// bodyError is the error a gated body's read fails with when a limit
// refuses the body (limits.Handler's bodyErr).
func bodyError(reason string) error {
	if Reason(reason) == Body {
		return errBody
	}
	return &Rejection{Reason: Reason(reason)}
}
