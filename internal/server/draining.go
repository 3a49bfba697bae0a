package server

import (
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/reply"
)

// drainingRefusal (reply.Draining) refuses a request that was waiting for a slot (in the
// app's queue) when levee began to drain, on SIGTERM or once an upgrade
// has handed over: the drain ends the wait. It is answered, 503 with
// Retry-After and the connection closed (the engines close every
// connection they answer while draining), rather than dropped without an
// answer, so that the client retries, on the levee that serves now.
var drainingRefusal = limits.Refusal{Code: reply.For(reply.Draining).Status, Reason: reply.Draining}

// unanswered is the refusal of a request whose wait ended without one
// (ref.Code 0): none when its client left, drainingRefusal when the
// server is draining, whether the drain ended the wait or began before
// it. A request that comes once the drain has begun is answered too: it
// may be the first on a connection accepted just before (an upgrade's old
// levee accepts until it hands over), and no HTTP client sends a
// connection's first request again when it is closed unanswered (Go's
// and browsers' retry only requests on reused connections).
func (s *Server) unanswered(ref limits.Refusal) limits.Refusal {
	if ref.Code == 0 && s.draining.Load() {
		return drainingRefusal
	}
	return ref
}
