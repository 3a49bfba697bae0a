package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// StatusClientClosed is recorded (never sent) when the client went away
// before levee could answer, as nginx does.
const StatusClientClosed = limits.StatusClientClosed

// exchange is one request as its engine holds it: what the request path
// reads of it, and how the engine answers and forwards it. Each engine's
// adapter implements it on a pointer type, so serve is compiled once per
// engine and calls the adapter directly: nothing is boxed or allocated.
type exchange interface {
	checked
	accounted
	// ctx ends when the client has gone or the server shuts down.
	ctx() context.Context
	// waitCtx is ctx with the deadline at, for the wait in the queue
	// (deadline.Wait): held by the exchange, valid until it is freed.
	waitCtx(at time.Time) context.Context
	// readBody reads the request body ahead, up to the route's
	// request_buffer, before the request takes a slot; what it read goes to
	// the backend with the rest. ok false: refused (code 0: the client left).
	readBody(s *Server, rt *route, sh *limits.PathShape) (limits.Refusal, bool)
	// readAhead is what readBody read, and whether it is the whole body.
	readAhead() (head []byte, whole bool)
	// clientTimeout is the client's own deadline, from now: gRPC's
	// grpc-timeout, or the header named (canonical; "": none).
	clientTimeout(header string) (time.Duration, bool)
	// gone records that there is no one to answer.
	gone()
	// reused: the request is not its connection's first, so a client
	// sends it again by itself if the connection closes unanswered.
	reused() bool
	// forward sends the admitted request to a backend and passes on the
	// answer; it releases slot exactly once, with the status sent, perhaps
	// after it returns (a streamed body's end).
	forward(rt *route, sh *limits.PathShape, slot admit.Releaser, out toBackend)
	tracedReq
}

// checked is what check needs of a request: what the limits read of its
// head (Path, Target, Headers, ContentLength and ClientKey:
// limits.Request), and its refusals.
type checked interface {
	limits.Request
	// refuse answers a refusal; refuseShape a shape violation found before
	// the body was read (the engine drains or closes for the unread body).
	refuse(ref limits.Refusal)
	refuseShape(v *shape.Violation)
}

// accounted is what account reads of a request once it is done.
type accounted interface {
	host() string
	Path() string
	// TopKey is who the request is for the top clients: the client key if
	// it is a header the request has, else the peer's address. A view, valid
	// until the request is observed.
	TopKey(k clientkey.Source) string
	// status is the code to record once the request is done: what was sent,
	// 101 for an upgrade, 499 when the client left first.
	status() int
	// rejected reports whether the answer carries Levee-Reject;
	// rejectReason is its value (for the logs only: it may allocate).
	rejected() bool
	rejectReason() string
	// bytes is the request's and the response's body bytes, as far as
	// known once the request is done (a body streamed without a length
	// counts as levee has passed it on); items its batch items.
	bytes() uint64
	items() uint64
	// method and remote are for the access log only.
	method() string
	remote() string
}

// serve is the request path, for both engines: route, shape, rate, admit,
// protect, then balance and forward (the engine's), and observe.
func serve[E exchange](s *Server, e E) {
	snap := s.current.Load()
	host, path := e.host(), e.Path()
	rt, ok := snap.catalog.Lookup(host, path)
	if !ok && s.lazy != nil {
		var ref limits.Refusal
		rt, ref, ok = s.routeStored(e.ctx(), host, path)
		switch {
		case ref.Code != 0:
			e.refuse(ref)
			s.unrouted.Observe(ref.Code, 0)
			return
		case !ok && e.ctx().Err() != nil:
			e.gone()
			s.unrouted.Observe(StatusClientClosed, 0)
			return
		}
	}
	if !ok {
		// Never an open proxy: a host no app claims gets a short 404.
		e.refuse(noRoute)
		s.unrouted.Observe(http.StatusNotFound, 0)
		return
	}
	start := s.clk.Now()
	tr := beginTrace(snap, e, start)
	// Deferred: a request whose handler panics is still accounted for.
	defer finish(s, snap, rt, e, start)
	p, ok := check(rt, e, start, tr)
	if ok {
		pass(s, rt, e, start, tr, p, nil)
	}
}

// check applies the limits known from e's head (limits.Check), and
// answers a refusal.
func check[E checked](rt *route, e E, start time.Time, tr *trace.Request) (limits.Passed, bool) {
	p, v, ref, ok := limits.Check(&rt.Gate, e, start, tr)
	switch {
	case v != nil:
		e.refuseShape(v)
	case !ok:
		e.refuse(ref)
	}
	return p, ok
}

// pass is the request path once check let e through: read the body
// ahead, admit, protect, forward. adm is the admission the event loop
// began (nil: none).
func pass[E exchange](s *Server, rt *route, e E, start time.Time, tr *trace.Request, p limits.Passed, adm *admission) {
	defer adm.cancel() // if it was not used: refused before it
	sh, client, path := p.Shape, p.Client, e.Path()
	// The body is read before the request takes a slot, so that a slow
	// client holds a buffer and its connection, never the backend's slot.
	ref, ok := e.readBody(s, rt, sh)
	if !ok {
		if ref.Code == 0 {
			e.gone()
		} else {
			e.refuse(ref)
		}
		return
	}
	out := toBackend{check: sh.Check, shadow: p.Shadow | ref.Shadow}
	if rt.Shadow&limits.BatchShadows != 0 {
		head, whole := e.readAhead()
		var got limits.ShadowSet
		out.check, got = rt.ShadowBatch(sh, head, whole)
		out.shadow |= got
	}
	// The deadline: from the arrival, the app's timeout or the client's.
	left, own := deadlineOf(rt, e)
	if left <= 0 {
		e.refuse(rt.DeadlinePassed())
		return
	}
	out.deadline = start.Add(left)
	ctx := e.ctx()
	live := ctx.Err() == nil // else the drain began before it could wait (draining.go)
	if own {
		// The client's deadline may end the wait in the queue. (The app's
		// timeout, seconds away, all but never does; a request it passes
		// in the queue is refused once admitted, below.)
		ctx = e.waitCtx(out.deadline)
	}
	slot, ref, ok := s.enter(ctx, rt, path, client, start, tr, adm)
	if !ok {
		if ref = s.unanswered(ref, live, e.reused()); ref.Code == 0 {
			e.gone()
		} else {
			e.refuse(ref)
		}
		return
	}
	if !s.clk.Now().Before(out.deadline) {
		// It passed while the request queued: refused, never sent.
		admit.Release(slot, reply.DeadlineReply.Status)
		e.refuse(rt.DeadlinePassed())
		return
	}
	tr.Mark(trace.StageForward, s.clk)
	e.forward(rt, sh, slot, out)
}

// toBackend is what serve hands forward beside the route: the checker
// whose batch limit forward enforces (nil: none), the shadowed reasons
// and the request's deadline.
type toBackend struct {
	check    *shape.Checker
	shadow   limits.ShadowSet
	deadline time.Time
	// loop is the call an event loop began and hands on (forwardInLoop);
	// it holds the slot.
	loop *forward.LoopCall
}

// noRoute is the refusal of a request no app claims.
var noRoute = limits.Refusal{Code: http.StatusNotFound, Reason: reply.NoRoute}

// finish accounts for a routed request once it is done, and ends its
// trace; code is the status it recorded (account).
func finish[E exchange](s *Server, snap *snapshot, rt *route, e E, start time.Time) (code int) {
	code, end := account(s, snap, rt, e, start)
	endTrace(snap, rt, e, code, end)
	return code
}

// account counts a routed request once it is done: metrics, the top
// clients, the access log (sampled), a refusal's debug line (rate-limited),
// and returns its status and when it ended. A request neither log takes
// allocates nothing here.
func account[E accounted](s *Server, snap *snapshot, rt *route, e E, start time.Time) (code int, end time.Time) {
	end = s.clk.Now()
	code = e.status()
	took := end.Sub(start)
	rt.app.Metrics.Observe(code, took.Seconds())
	rejected := e.rejected()
	rt.app.Metrics.Live.Request(end)
	logged := snap.access.Take()
	var bytes uint64
	if rt.top != nil || logged {
		bytes = e.bytes()
	}
	if rt.top != nil {
		rt.top.Observe(e.TopKey(rt.ClientKey), rejected, bytes, e.items(), end)
	}
	var reason string // read only for a line that is written: it may allocate
	if rejected && logged {
		reason = e.rejectReason()
	}
	if logged {
		s.access.Write(observe.AccessRecord{Time: end, App: rt.app.Name, Method: e.method(), Host: e.host(),
			Path: e.Path(), Status: code, Duration: took, Remote: e.remote(), Bytes: bytes, Reject: reason})
	}
	if rejected {
		if l, ok := s.errlog.Take(slog.LevelDebug, observe.EventRefused, rt.app.Name); ok {
			if reason == "" {
				reason = e.rejectReason()
			}
			l.Log("reason", reason, "status", code, "remote", e.remote())
		}
	}
	return code, end
}

// aheadLimit is how much of a body to read before admission: the route's
// request_buffer, at most one byte past limits.body (which shows a body
// too large), at most the declared length (-1: unknown).
func aheadLimit(rt *route, sh *limits.PathShape, declared int64) int64 {
	limit := min(rt.body.ahead, rt.BodyLimit(sh)+1)
	if declared >= 0 && declared < limit {
		limit = declared
	}
	return limit
}

// bodyRefusal is the answer to a body read ahead of admission: got bytes
// read of the declared length (-1: unknown), err the read's failure (nil:
// it stopped at the limit or the end).
func (s *Server) bodyRefusal(rt *route, sh *limits.PathShape, declared int64, got int, err error, remote string) (limits.Refusal, bool) {
	switch {
	case err == nil && int64(got) > sh.Body && declared > sh.Body:
		return limits.Refusal{}, true // shadowed: Check counted it on its declared length
	case err == nil && int64(got) > sh.Body:
		if marks, ok := rt.Shadows(reply.Body); ok {
			return limits.Refusal{Shadow: marks}, true
		}
		rt.app.Metrics.Rejected(reply.Body)
		return limits.Refusal{Code: http.StatusRequestEntityTooLarge, Reason: reply.Body, Reply: reply.BodyCutReply}, false
	case errors.Is(err, netlimit.ErrTooSlow):
		rt.app.Metrics.Rejected(reply.MinRate)
		if l, ok := s.errlog.Take(slog.LevelInfo, observe.EventClientTooSlow, rt.app.Name); ok {
			l.Log("direction", "request", "read", got, "remote", remote)
		}
		return limits.Refusal{Code: http.StatusRequestTimeout, Reason: reply.MinRate}, false
	case err != nil:
		return limits.Refusal{Code: http.StatusBadRequest, Reason: reply.BadRequestBody}, false
	}
	return limits.Refusal{}, true
}

// enter is the path between the body's read and forward: admission with
// the request's ticket (or the end of the one adm began), then
// backend_limits. ok means the caller holds a slot and must release it
// once the response is done; otherwise the refusal says what to answer
// (code 0: no one to answer). now is when the request arrived; tr records
// the stages (nil: not traced).
func (s *Server) enter(ctx context.Context, rt *route, path, client string, now time.Time, tr *trace.Request, adm *admission) (admit.Releaser, limits.Refusal, bool) {
	var slot admit.Releaser
	var ref limits.Refusal
	var ok bool
	if adm.begun() {
		adm.used = true
		slot, ref, ok = rt.Finish(ctx, adm.t, adm.p, tr)
	} else {
		slot, ref, ok = rt.Admit(ctx, rt.Ticket(path, client), tr)
	}
	if !ok || rt.guard == nil {
		return slot, ref, ok
	}
	tr.Mark(trace.StageBackendLimits, s.clk)
	held, err := rt.guard.Enter(ctx, client, now)
	if err != nil {
		slot.Release()
		return nil, rt.refuseGuard(err), false
	}
	return &protect.Held{App: slot, Pool: held}, limits.Refusal{}, true
}

// refuseGuard turns a backend_limits refusal into the answer, counted; a
// client that went away while waiting gets none.
func (rt *route) refuseGuard(err error) limits.Refusal {
	rej, ok := limits.AsRejection(err)
	if !ok {
		if err == admit.ErrSealed {
			return limits.Sealed
		}
		return limits.Refusal{}
	}
	rt.app.Metrics.Rejected(string(rej.Reason))
	return limits.Refusal{Code: http.StatusServiceUnavailable, Reason: string(rej.Reason), RetryAfter: rej.RetryAfter}
}
