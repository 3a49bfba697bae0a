package server

import (
	"context"
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

// queueDeadline is a request's context with its deadline, for the wait
// in the queue only: the limiter reads Deadline and bounds its own timer
// by it, so no timer or goroutine is made for it (context.WithDeadline
// would watch the fasthttp engine's context, which polls the client's
// socket once watched). Each exchange holds one (waitCtx), so a gRPC
// call's deadline allocates nothing: nothing keeps the context past the
// wait (the limiter's waiter does not hold it).
type queueDeadline struct {
	context.Context
	at time.Time
}

// with sets d to ctx and at and returns it.
func (d *queueDeadline) with(ctx context.Context, at time.Time) context.Context {
	*d = queueDeadline{Context: ctx, at: at}
	return d
}

func (e *httpExchange) waitCtx(at time.Time) context.Context { return e.wait.with(e.ctx(), at) }
func (e *fastExchange) waitCtx(at time.Time) context.Context { return e.wait.with(e.ctx(), at) }

func (c *queueDeadline) Deadline() (time.Time, bool) {
	if at, ok := c.Context.Deadline(); ok && at.Before(c.at) {
		return at, true
	}
	return c.at, true
}

// clientTimeout is the deadline a gRPC call or header (canonical; ""
// none) gives, the smaller if both do.
func (e *httpExchange) clientTimeout(header string) (d time.Duration, ok bool) {
	h := e.R.Header
	if e.grpc {
		if v := h[deadline.GRPCHeader]; len(v) == 1 {
			d, ok = deadline.ParseGRPCTimeout(v[0])
		}
	}
	if header != "" {
		if v := h[header]; len(v) == 1 {
			if hd, hok := deadline.ParseMillis(v[0]); hok && (!ok || hd < d) {
				d, ok = hd, true
			}
		}
	}
	return d, ok
}

// clientTimeout is the deadline header gives ("": none looked for; gRPC
// has no HTTP/1.1 form).
func (e *fastExchange) clientTimeout(header string) (time.Duration, bool) {
	if header == "" {
		return 0, false
	}
	for k, v := range e.c.Request.Header.All() {
		if ascii.EqualFold(k, header) {
			return deadline.ParseMillis(b2s(v)) // not kept
		}
	}
	return 0, false
}
