package server

import (
	"context"
	"time"

	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/reply"
)

// drainingRefusal (reply.Draining) refuses a request that was waiting for a slot (in the
// app's queue) when levee began to drain, on SIGTERM or once an upgrade
// has handed over: the drain ends the wait. On HTTP/1.1 it is answered,
// 503 with Retry-After and the connection closed (the engines close every
// connection they answer while draining), rather than dropped without an
// answer, so that the client retries, on the levee that serves now. On
// HTTP/2 its stream is refused instead (REFUSED_STREAM, handler.go),
// which the client sends again by itself.
var drainingRefusal = limits.Refusal{Code: reply.For(reply.Draining).Status, Reason: reply.Draining}

// unanswered is the refusal of a request whose wait ended without one
// (ref.Code 0): none when its client left; drainingRefusal when the
// server's drain ended a wait that began before it (live), or when a
// connection's first request came once the drain had begun on HTTP/2
// (whose stream is then refused: handler.go). No HTTP client sends a
// connection's first request again when it is closed unanswered, so on
// HTTP/1.1 such a request (an upgrade's old levee accepts until it hands
// over) is not refused at all: serve admits it as any other
// (exchange.servedInDrain), and the drain waits for it. A request on a
// reused connection that came once the drain had begun is closed
// unanswered: nothing was sent, so its client sends it again on a new
// connection by itself (Go's and browsers' do, for an idempotent
// request), to the levee that serves now, rather than seeing a 503.
func (s *Server) unanswered(ref limits.Refusal, live, reused bool) limits.Refusal {
	if ref.Code == 0 && s.draining.Load() && (live || !reused) {
		return drainingRefusal
	}
	return ref
}

// noWait is a request's context once the drain has begun, for a request
// the drain serves (exchange.servedInDrain): not done, so the limiter
// gives it a free slot, but past its deadline, so it never queues (the
// limiter refuses it at once: it would wait, and serve answers
// drainingRefusal).
type noWait struct{ context.Context }

func (noWait) Deadline() (time.Time, bool) { return aLongTimeAgo, true }
func (noWait) Done() <-chan struct{}       { return nil }
func (noWait) Err() error                  { return nil }

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)
