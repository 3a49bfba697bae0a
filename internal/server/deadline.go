package server

import (
	"context"
	"iter"
	"time"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/deadline"
)

// deadlineOf is the time a request routed to rt may take from its
// arrival: the app's upstream.deadline.timeout, or the client's own if shorter
// (grpc-timeout for a gRPC call, upstream.deadline.header for any). A
// request whose deadline passes before it is sent is refused (deadline);
// the backend gets what is left as Levee-Deadline (and grpc-timeout for
// gRPC). client reports whether the client gave one.
func deadlineOf[E exchange](rt *route, e E) (left time.Duration, client bool) {
	timeout, header := config.DefaultAppTimeout, ""
	if u := rt.pool.Deadline(); u != nil {
		timeout = u.Timeout.D()
		header = u.CanonicalHeader()
	}
	d, ok := e.clientTimeout(header)
	return deadline.Left(time.Time{}, time.Time{}, timeout, d, ok), ok
}

// waitCtx is the exchange's deadline.Wait, over its ctx.
func (e *httpExchange) waitCtx(at time.Time) context.Context { return e.wait.With(e.ctx(), at) }
func (e *fastExchange) waitCtx(at time.Time) context.Context { return e.wait.With(e.ctx(), at) }

// clientTimeout is the deadline a gRPC call or header (canonical; ""
// none) gives, the smaller if both do.
func (e *httpExchange) clientTimeout(header string) (time.Duration, bool) {
	return deadline.FromHTTP(e.R.Header, e.grpc, header)
}

// clientTimeout is the deadline header gives (clientTimeoutOf).
func (e *fastExchange) clientTimeout(header string) (time.Duration, bool) {
	return clientTimeoutOf(e.c.Request.Header.All(), header)
}

// clientTimeoutOf is the client's deadline among an HTTP/1.1 request's
// fields: what the first field named header gives ("": none looked for;
// gRPC has no HTTP/1.1 form). Both engines read it so (fastExchange,
// loopHead).
func clientTimeoutOf(fields iter.Seq2[[]byte, []byte], header string) (time.Duration, bool) {
	if header == "" {
		return 0, false
	}
	for k, v := range fields {
		if ascii.EqualFold(k, header) {
			return deadline.ParseMillis(b2s(v)) // not kept
		}
	}
	return 0, false
}
