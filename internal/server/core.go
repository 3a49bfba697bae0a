package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// StatusClientClosed is recorded (never sent) when the client went away
// before levee could answer, as nginx does.
const StatusClientClosed = 499

// reasonBody: the limit behind a 413 for limits.body.
const reasonBody = reply.Body

// exchange is one request as its engine holds it: what the request path
// reads of it, and how the engine answers and forwards it. Each engine's
// adapter implements it on a pointer type, so serve is compiled once per
// engine and calls the adapter directly: nothing is boxed or allocated.
type exchange interface {
	host() string
	path() string
	// target is the request-target as sent (url_length, query values).
	target() string
	// headers counts the header fields, Host included, and their bytes.
	headers() (count, size int)
	// contentLength is the declared body length; -1 when unknown (chunked).
	contentLength() int64
	// clientKey is the client key as a string that may be kept.
	clientKey(k forward.KeySource) string
	// topKey is who the request is for the top clients: the client key if
	// it is a header the request has, else the peer's address. A view, valid
	// until the request is observed.
	topKey(k forward.KeySource) string
	// ctx ends when the client has gone or the server shuts down.
	ctx() context.Context
	// readBody reads the request body ahead, up to the route's
	// request_buffer, before the request takes a slot; what it read goes to
	// the backend with the rest. ok false: refused (code 0: the client left).
	readBody(s *Server, rt *route, sh *pathShape) (refusal, bool)
	// readAhead is what readBody read, and whether it is the whole body.
	readAhead() (head []byte, whole bool)
	// refuse answers a refusal; refuseShape a shape violation found before
	// the body was read (the engine drains or closes for the unread body).
	refuse(ref refusal)
	refuseShape(v *shape.Violation)
	// gone records that there is no one to answer.
	gone()
	// forward sends the admitted request to a backend and passes on the
	// answer; it releases slot exactly once, with the status sent, perhaps
	// after it returns (a streamed body's end).
	forward(rt *route, sh *pathShape, slot forward.Releaser, out toBackend)
	// status is the code to record once the request is done: what was sent,
	// 101 for an upgrade, 499 when the client left first.
	status() int
	// rejected reports whether the answer carries Levee-Reject;
	// rejectReason is its value (for the logs only: it may allocate).
	rejected() bool
	// bytes is the request's and the response's body bytes, as far as
	// known once the request is done (a body streamed without a length
	// counts as levee has passed it on); items its batch items.
	bytes() uint64
	items() uint64
	rejectReason() string
	// method and remote are for the access log only.
	method() string
	remote() string
	// traceState is the request's trace state, held by the exchange;
	// incomingTrace reads the client's trace context; describe
	// adds the span's tracestate and returns what else it records of the
	// request (tracing.go).
	traceState() *trace.Request
	incomingTrace() trace.Incoming
	describe(sp *trace.Span) spanView
}

// serve is the request path, for both engines: route, shape, rate, admit,
// protect, then balance and forward (the engine's), and observe.
func serve[E exchange](s *Server, e E) {
	snap := s.current.Load()
	host, path := e.host(), e.path()
	rt, ok := snap.catalog.Lookup(host, path)
	if !ok && s.lazy != nil {
		var ref refusal
		rt, ref, ok = s.routeStored(e.ctx(), host, path)
		switch {
		case ref.code != 0:
			e.refuse(ref)
			s.unrouted.Observe(ref.code, 0)
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
	// Deferred: net/http's ReverseProxy aborts a response with a panic.
	defer account(s, snap, rt, e, start)
	sh := rt.shapes.forPath(path)
	count, size := e.headers()
	tr.Mark(trace.StageShape, s.clk)
	v, shadow := rt.checkShape(sh, e.target(), count, size)
	if v != nil {
		e.refuseShape(v)
		return
	}
	var client string
	if rt.needsClient() {
		client = e.clientKey(rt.clientKey)
	}
	tr.Mark(trace.StageRate, s.clk)
	ref, ok := rt.limit(client, e.contentLength(), sh.body, start)
	if !ok {
		e.refuse(ref)
		return
	}
	shadow |= ref.shadow
	// The body is read before the request takes a slot, so that a slow
	// client holds a buffer and its connection, never the backend's slot.
	if ref, ok = e.readBody(s, rt, sh); !ok {
		if ref.code == 0 {
			e.gone()
		} else {
			e.refuse(ref)
		}
		return
	}
	out := toBackend{check: sh.check, shadow: shadow | ref.shadow}
	if rt.shadow&batchShadows != 0 {
		head, whole := e.readAhead()
		var got shadowSet
		out.check, got = rt.shadowBatch(sh, head, whole)
		out.shadow |= got
	}
	slot, ref, ok := s.enter(e.ctx(), rt, path, client, start, tr)
	if !ok {
		if ref.code == 0 {
			e.gone()
		} else {
			e.refuse(ref)
		}
		return
	}
	tr.Mark(trace.StageForward, s.clk)
	e.forward(rt, sh, slot, out)
}

// toBackend is what serve hands forward beside the route: the checker
// whose batch limit forward enforces (nil: none) and the shadowed reasons.
type toBackend struct {
	check  *shape.Checker
	shadow shadowSet
}

// noRoute is the refusal of a request no app claims.
var noRoute = refusal{code: http.StatusNotFound, reason: reply.NoRoute}

// account counts a routed request once it is done: metrics, the top
// clients, the access log (sampled), a refusal's debug line (rate-limited).
// A request neither log takes allocates nothing here.
func account[E exchange](s *Server, snap *snapshot, rt *route, e E, start time.Time) {
	end := s.clk.Now()
	code, took := e.status(), end.Sub(start)
	rt.app.metrics.Observe(code, took.Seconds())
	rejected := e.rejected()
	rt.app.metrics.Live.Request(end)
	logged := snap.access.Take()
	var bytes uint64
	if rt.top != nil || logged {
		bytes = e.bytes()
	}
	if rt.top != nil {
		rt.top.Observe(e.topKey(rt.clientKey), rejected, bytes, e.items(), end)
	}
	var reason string // read only for a line that is written: it may allocate
	if rejected && logged {
		reason = e.rejectReason()
	}
	if logged {
		s.access.Write(observe.AccessRecord{Time: end, App: rt.app.name, Method: e.method(), Host: e.host(),
			Path: e.path(), Status: code, Duration: took, Remote: e.remote(), Bytes: bytes, Reject: reason})
	}
	if rejected {
		if l, ok := s.errlog.Take(slog.LevelDebug, observe.EventRefused, rt.app.name); ok {
			if reason == "" {
				reason = e.rejectReason()
			}
			l.Log("reason", reason, "status", code, "remote", e.remote())
		}
	}
	endTrace(snap, rt, e, code, end)
}

// refusal is a request refused before any backend work. A zero code means
// the client went away (or the server is shutting down) while it was
// queued: there is no one to answer.
type refusal struct {
	code       int
	reason     string
	retryAfter time.Duration
	rate       *rateRule          // set for a rate refusal: its RateLimit fields
	decision   ratelimit.Decision // with rate
	reply      *reply.Reply       // the answer, when not reply.For(reason)
	shadow     shadowSet          // when let through: what shadowed limits would have refused
}

// answer is the reply of ref.
func (ref *refusal) answer() *reply.Reply {
	if ref.reply != nil {
		return ref.reply
	}
	return reply.For(ref.reason)
}

// aheadLimit is how much of a body to read before admission: the route's
// request_buffer, at most one byte past limits.body (which shows a body
// too large), at most the declared length (-1: unknown).
func aheadLimit(rt *route, sh *pathShape, declared int64) int64 {
	limit := min(rt.body.ahead, rt.bodyLimit(sh)+1)
	if declared >= 0 && declared < limit {
		limit = declared
	}
	return limit
}

// bodyRefusal is the answer to a body read ahead of admission: got bytes
// read of the declared length (-1: unknown), err the read's failure (nil:
// it stopped at the limit or the end).
func (s *Server) bodyRefusal(rt *route, sh *pathShape, declared int64, got int, err error, remote string) (refusal, bool) {
	switch {
	case err == nil && int64(got) > sh.body && declared > sh.body:
		return refusal{}, true // shadowed: limit counted it on its declared length
	case err == nil && int64(got) > sh.body:
		if marks, ok := rt.shadows(reasonBody); ok {
			return refusal{shadow: marks}, true
		}
		rt.app.metrics.Rejected(reasonBody)
		return refusal{code: http.StatusRequestEntityTooLarge, reason: reasonBody, reply: reply.BodyCutReply}, false
	case errors.Is(err, netlimit.ErrTooSlow):
		rt.app.metrics.Rejected(reply.MinRate)
		if l, ok := s.errlog.Take(slog.LevelInfo, observe.EventClientTooSlow, rt.app.name); ok {
			l.Log("direction", "request", "read", got, "remote", remote)
		}
		return refusal{code: http.StatusRequestTimeout, reason: reply.MinRate}, false
	case err != nil:
		return refusal{code: http.StatusBadRequest, reason: reply.BadRequestBody}, false
	}
	return refusal{}, true
}

// The replies of the limits the server applies, in the one table with
// forward's and shape's (package reply); each refusal is answered from it.
func init() {
	// The app's concurrency and rate limits register theirs in package
	// limits (shared with the admission middleware).
	for _, r := range []admit.Reason{admit.QueueFull, admit.QueueTimeout, admit.Shed, admit.ClientShare} {
		reply.Register(reply.Reply{Status: http.StatusServiceUnavailable, Reason: protect.Prefix + string(r)})
	}
	for _, r := range []admit.Reason{protect.ReasonRate, protect.ReasonShare} {
		reply.Register(reply.Reply{Status: http.StatusServiceUnavailable, Reason: string(r)})
	}
	for _, r := range []string{netlimit.MaxConns, netlimit.ConnsPerIP} {
		reply.Register(reply.Reply{Status: http.StatusServiceUnavailable, Reason: r, RetryAfter: time.Second})
	}
	for _, r := range []string{reasonCatalogBusy, reasonCatalogUnavailable} {
		reply.Register(reply.Reply{Status: http.StatusServiceUnavailable, Reason: r})
	}
}

// limit is the step before the body is read: the rate limits, then
// limits.body on the declared length (-1: unknown, then the engine enforces
// it while reading). now is when the request arrived. A request let through
// carries in its refusal's shadow what shadowed limits would have refused.
// It allocates nothing.
func (rt *route) limit(client string, contentLength, bodyLimit int64, now time.Time) (refusal, bool) {
	var ref refusal
	if rt.appRate != nil || rt.clientRate != nil {
		var ok bool
		if ref, ok = rt.limitRate(client, now); !ok {
			return ref, false
		}
	}
	if contentLength > bodyLimit {
		marks, ok := rt.shadows(reasonBody)
		if !ok {
			rt.app.metrics.Rejected(reasonBody)
			return refusal{code: http.StatusRequestEntityTooLarge, reason: reasonBody}, false
		}
		ref.shadow |= marks
	}
	return ref, true
}

// admit takes the app's concurrency slot, waiting in its queue at most
// until ctx ends (the wait of a request that queued is observed). ok means
// the caller holds a slot and must Release it; otherwise the refusal is
// counted and says what to answer. It allocates nothing.
func (rt *route) admit(ctx context.Context, t admit.Ticket, tr *trace.Request) (refusal, bool) {
	waited, err := rt.app.limiter.AcquireWait(ctx, t)
	if err != nil {
		if rej, ok := asRejection(err); ok {
			rt.app.metrics.Rejected(string(rej.Reason))
			return refusal{code: http.StatusServiceUnavailable, reason: string(rej.Reason), retryAfter: rej.RetryAfter}, false
		}
		return refusal{}, false
	}
	if waited > 0 {
		rt.app.metrics.QueueWait(waited)
		tr.Waited(waited)
	}
	return refusal{}, true
}

// enter is the path between the body's read and forward: admission with
// the request's ticket, then backend_limits. ok means the caller holds a
// slot and must release it once the response is done; otherwise the
// refusal says what to answer (code 0: no one to answer). now is when the
// request arrived; tr records the stages (nil: not traced).
func (s *Server) enter(ctx context.Context, rt *route, path, client string, now time.Time, tr *trace.Request) (forward.Releaser, refusal, bool) {
	t := rt.ticket(path, client)
	if ref, ok := rt.admit(ctx, t, tr); !ok {
		return nil, ref, false
	}
	tr.Mark(trace.StageAdmitted, s.clk)
	var slot forward.Releaser
	switch {
	case rt.adaptive != nil:
		slot = &adaptiveSlot{a: rt.adaptive, l: rt.app.limiter, t: t, clk: s.clk,
			start: s.clk.Now(), inflight: rt.app.limiter.InFlight()}
	case t.Client != "":
		slot = &ticketSlot{l: rt.app.limiter, t: t}
	default:
		slot = rt.app.limiter // no allocation on the common path
	}
	if rt.guard == nil {
		return slot, refusal{}, true
	}
	tr.Mark(trace.StageBackendLimits, s.clk)
	held, err := rt.guard.Enter(ctx, client, now)
	if err != nil {
		slot.Release()
		return nil, rt.refuseGuard(err), false
	}
	return &pooledSlot{app: slot, pool: held}, refusal{}, true
}

// pooledSlot holds both the app's concurrency slot and the pool's.
type pooledSlot struct {
	app  forward.Releaser
	pool protect.Slot
}

func (p *pooledSlot) Release() { p.ReleaseStatus(0) }

// ReleaseStatus passes the status on to the app's slot (an adaptive limit
// samples it).
func (p *pooledSlot) ReleaseStatus(code int) {
	p.pool.Release()
	forward.Release(p.app, code)
}

// refuseGuard turns a backend_limits refusal into the answer, counted; a
// client that went away while waiting gets none.
func (rt *route) refuseGuard(err error) refusal {
	rej, ok := asRejection(err)
	if !ok {
		return refusal{}
	}
	rt.app.metrics.Rejected(string(rej.Reason))
	return refusal{code: http.StatusServiceUnavailable, reason: string(rej.Reason), retryAfter: rej.RetryAfter}
}

// needsClient reports whether any step of the route reads the client key.
func (rt *route) needsClient() bool {
	return rt.clientRate != nil || rt.fairShare || rt.classes.NeedsClient() || rt.guard != nil
}

// ticket is what the request asks the limiter for: its priority class and,
// with fair sharing, who it is.
func (rt *route) ticket(path, client string) admit.Ticket {
	t := admit.Ticket{Class: rt.classes.Class(path, client)}
	if rt.fairShare {
		t.Client = client
	}
	return t
}

// checkShape applies the request-shape limits known before the body:
// target length, query values, header count and bytes. A violation is
// counted; the caller answers it. A request let through carries what
// shadowed limits would have refused (marks).
func (rt *route) checkShape(sh *pathShape, target string, headerCount, headerBytes int) (v *shape.Violation, marks shadowSet) {
	v = sh.check.CheckTarget(target)
	if v == nil {
		v = sh.check.CheckHeaders(headerCount, headerBytes)
	}
	if v != nil && rt.shadow != 0 {
		v, marks = rt.shadowShape(sh, target, headerCount, headerBytes)
	}
	if v != nil {
		rt.app.metrics.Rejected(string(v.Reason))
	}
	return v, marks
}

// asRejection finds the *admit.Rejection in err. Acquire returns it
// unwrapped, and the type assertion then spares errors.As's allocation.
func asRejection(err error) (*admit.Rejection, bool) {
	if rej, ok := err.(*admit.Rejection); ok {
		return rej, true
	}
	var rej *admit.Rejection
	ok := errors.As(err, &rej)
	return rej, ok
}
