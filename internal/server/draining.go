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
// connection's first request came once the drain had begun (an upgrade's
// old levee accepts until it hands over): no HTTP client sends a
// connection's first request again when it is closed unanswered. A
// request on a reused connection that came once the drain had begun is
// closed unanswered: nothing was sent, so its client sends it again on a
// new connection by itself (Go's and browsers' do, for an idempotent
// request), to the levee that serves now, rather than seeing a 503.
//
// A request a sealed limiter turned away (limits.Sealed: this levee has
// handed over, and drains) is answered as one that came once the drain had
// begun: the levee that serves now has its slots.
func (s *Server) unanswered(ref limits.Refusal, live, reused bool) limits.Refusal {
	if ref.Code != 0 {
		return ref
	}
	if ref.Reason == limits.Sealed.Reason {
		if reused {
			return limits.Refusal{}
		}
		return drainingRefusal
	}
	if s.draining.Load() && (live || !reused) {
		return drainingRefusal
	}
	return limits.Refusal{}
}

// AwaitFirstRequests waits, until ctx ends, for every open client
// connection to have begun its first request, and returns how many have
// not. An upgrade's old levee calls it once it has stopped accepting and
// before it hands its limits over: a connection it accepted just before,
// whose request it had not read yet (a TLS handshake under way, or a
// goroutine not yet run), would otherwise get that request's 503 draining
// (unanswered, above) from the drain that follows; waited for, it is
// admitted under the limits this levee still holds. A client that stays
// silent (a browser's preconnect) is waited for only until ctx ends.
func (s *Server) AwaitFirstRequests(ctx context.Context) int64 {
	tick := time.NewTicker(freshPoll)
	defer tick.Stop()
	for {
		var fresh int64
		for _, l := range s.listeners {
			fresh += l.ln.Fresh()
		}
		if fresh == 0 || ctx.Err() != nil {
			return fresh
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// freshPoll is how often AwaitFirstRequests looks: a first request is
// read within microseconds of its arrival, and an upgrade is rare.
const freshPoll = time.Millisecond
