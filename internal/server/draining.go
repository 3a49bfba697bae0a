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
// server's drain ended a wait that began before it (live). A request that
// arrived once the drain had begun (on a keep-alive connection, as the
// drain closes it) is still closed unanswered: nothing was sent, so its
// client may send it again on a new connection, which an HTTP client does
// by itself for an idempotent request.
func (s *Server) unanswered(ref limits.Refusal, live bool) limits.Refusal {
	if ref.Code == 0 && live && s.draining.Load() {
		return drainingRefusal
	}
	return ref
}
