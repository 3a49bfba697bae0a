package admission

import (
	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/shape"
)

// Reason names the limit that refused a request or a task. It is the value
// levee sends in its Levee-Reject response header and counts in
// levee_rejected_total{reason}, so a service using this package and the proxy
// speak of their refusals in the same words.
//
// It is the proxy's own type (internal/admit.Reason), not a copy: see the
// package documentation, "One implementation".
type Reason = admit.Reason

// Rejection is a request or task refused by a limit:
//
//	type Rejection struct {
//		Reason     Reason        // which limit refused
//		RetryAfter time.Duration // a hint for the client (Retry-After); 0: retrying cannot help
//	}
//
// Its Error method returns "admit: rejected (REASON), retry after D".
// Rejections returned by this package and by levee may be shared between
// callers: treat them as read-only. Find one in an error with errors.As:
//
//	var rej *admission.Rejection
//	if errors.As(err, &rej) { ... rej.Reason ... }
//
// It is the proxy's own type (internal/admit.Rejection), so a refusal from
// the proxy's limiter and one from a Budget are one type.
type Rejection = admit.Rejection

// The reasons, spelled as levee spells them.
const (
	// QueueFull: at the concurrency limit, and the wait queue is full (levee: 503).
	QueueFull Reason = admit.QueueFull
	// QueueTimeout: the request waited its max wait without getting a slot (levee: 503).
	QueueTimeout Reason = admit.QueueTimeout
	// Shed: the queue is overloaded and the request is sheddable, or it was
	// displaced by a request of a higher class (levee: 503).
	Shed Reason = admit.Shed
	// ClientShare: at the concurrency limit, and the client already holds or
	// waits for its fair share of the slots (levee: 503).
	ClientShare Reason = admit.ClientShare
	// BatchItems: a batch holds more items than allowed (levee: 422, for a
	// JSON batch field counted by limits.batch). A Group made WithMaxItems
	// refuses with it, RetryAfter 0: the same batch is refused again.
	BatchItems Reason = Reason(shape.BatchItems)
	// BatchJSON: the body of a request with limits.batch is not valid JSON
	// (levee: 400); BatchShape: it is JSON, but not of a shape whose items
	// can be counted (levee: 422).
	BatchJSON  Reason = Reason(shape.BatchJSON)
	BatchShape Reason = Reason(shape.BatchShape)
	// Rate: over limits.rate; ClientRate: over limits.client.rate (levee:
	// 429, with RateLimit and RateLimit-Policy).
	Rate       Reason = Reason(limits.ReasonRate)
	ClientRate Reason = Reason(limits.ReasonClientRate)
	// Body: the body is over limits.body (levee: 413).
	Body Reason = Reason(limits.ReasonBody)
	// URLLength, QueryValues: the request target is over limits.url_length,
	// or has more than limits.query_values parameters (levee: 414).
	URLLength   Reason = Reason(shape.URLLength)
	QueryValues Reason = Reason(shape.QueryValues)
	// HeaderCount, HeaderBytes: the header fields are over
	// limits.header_count or limits.header_bytes (levee: 431).
	HeaderCount Reason = Reason(shape.HeaderCount)
	HeaderBytes Reason = Reason(shape.HeaderBytes)
)
