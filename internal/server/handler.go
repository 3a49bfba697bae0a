package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/shape"
)

// StatusClientClosed is recorded (never sent) when the client went away
// before levee could answer, as nginx does.
const StatusClientClosed = 499

// rejectBody reason: the limit behind a 413 for limits.body.
const reasonBody = "body"

// ServeHTTP is the request path: route, shape, admit, forward, observe.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := s.current.Load()
	rt, ok := snap.catalog.Lookup(r.Host, r.URL.Path)
	if !ok && s.lazy != nil {
		var ref refusal
		if rt, ref, ok = s.routeStored(r.Context(), r.Host, r.URL.Path); ref.code != 0 {
			reject(w, ref)
			s.unrouted.Observe(ref.code, 0)
			return
		} else if !ok && r.Context().Err() != nil {
			s.unrouted.Observe(StatusClientClosed, 0)
			return
		}
	}
	if !ok {
		// Never an open proxy: a host no app claims gets a short 404.
		w.Header().Set(forward.HeaderError, "no-route")
		http.Error(w, "levee: no app for this host and path", http.StatusNotFound)
		s.unrouted.Observe(http.StatusNotFound, 0)
		return
	}
	start := s.clk.Now()
	rec := newRecorder(w)
	defer func() {
		end := s.clk.Now()
		code, took := rec.status(r), end.Sub(start)
		rt.app.metrics.Observe(code, took.Seconds())
		if rt.top != nil {
			rt.top.Observe(topHTTP(rt.clientKey, r), rejectedHTTP(rec), end)
		}
		if snap.access {
			s.log.Info("access", "app", rt.app.name, "method", r.Method, "host", r.Host,
				"path", r.URL.Path, "status", code, "duration", took, "remote", r.RemoteAddr)
		}
		rec.free()
	}()

	sh := rt.shapes.forPath(r.URL.Path)
	count, size := shape.HeaderSize(r.Header)
	if v := rt.checkShape(sh, r.RequestURI, count+1, size+len("Host")+len(r.Host)); v != nil {
		rejectViolation(rec, v)
		return
	}
	if r.ContentLength < 0 { // chunked: enforce the limit while streaming
		r.Body = forward.GuardBody(http.MaxBytesReader(rec, r.Body, sh.body))
	}
	var client string
	if rt.needsClient() {
		client = rt.clientKey.HTTP(r)
	}
	var failed func() bool
	if rt.adaptive != nil {
		failed = func() bool { return rec.code >= 500 }
	}
	slot, ref, ok := s.enter(r.Context(), rt, r.URL.Path, client, r.ContentLength, sh.body, start, failed)
	if !ok {
		if ref.code != 0 {
			reject(rec, ref)
		}
		return // otherwise the client went away while queued
	}
	defer slot.Release() // deferred: ReverseProxy aborts with a panic mid-body
	rt.pool.Serve(rec, r, sh.check)
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
}

// admit is the engine-neutral core between routing and forwarding, called
// by both engines: limits.body on the declared length (-1: unknown, then
// the caller enforces it while streaming), then the app's concurrency
// limit, waiting in its queue at most until ctx ends (the wait of a request
// that queued is observed). ok means the caller
// holds a slot and must Release it; otherwise the refusal is counted and
// says what to answer. It allocates nothing.
func (rt *route) admit(ctx context.Context, contentLength, bodyLimit int64, t admit.Ticket) (refusal, bool) {
	if contentLength > bodyLimit {
		rt.app.metrics.Rejected(reasonBody)
		return refusal{code: http.StatusRequestEntityTooLarge, reason: reasonBody}, false
	}
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
	}
	return refusal{}, true
}

// enter is the engine-neutral path between shape and forward, called by
// both engines: the rate limits, then admission with the request's ticket.
// ok means the caller holds a slot and must Release it once the response
// is done; otherwise the refusal says what to answer (code 0: no one to
// answer). now is when the request arrived; failed tells an adaptive limit whether the request failed; nil
// means it never samples failure.
func (s *Server) enter(ctx context.Context, rt *route, path, client string, contentLength, bodyLimit int64,
	now time.Time, failed func() bool) (forward.Releaser, refusal, bool) {
	if rt.appRate != nil || rt.clientRate != nil {
		if ref, ok := rt.limitRate(client, now); !ok {
			return nil, ref, false
		}
	}
	t := rt.ticket(path, client)
	if ref, ok := rt.admit(ctx, contentLength, bodyLimit, t); !ok {
		return nil, ref, false
	}
	var slot forward.Releaser
	switch {
	case rt.adaptive != nil:
		slot = &adaptiveSlot{a: rt.adaptive, l: rt.app.limiter, t: t, clk: s.clk,
			start: s.clk.Now(), inflight: rt.app.limiter.InFlight(), failed: failed}
	case t.Client != "":
		slot = &ticketSlot{l: rt.app.limiter, t: t}
	default:
		slot = rt.app.limiter // no allocation on the common path
	}
	if rt.guard == nil {
		return slot, refusal{}, true
	}
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

func (p *pooledSlot) Release() {
	p.pool.Release()
	p.app.Release()
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
	return rt.clientRate != nil || rt.fairShare || rt.classes.needsClient() || rt.guard != nil
}

// ticket is what the request asks the limiter for: its priority class and,
// with fair sharing, who it is.
func (rt *route) ticket(path, client string) admit.Ticket {
	t := admit.Ticket{Class: rt.classes.class(path, client)}
	if rt.fairShare {
		t.Client = client
	}
	return t
}

// checkShape applies the request-shape limits known before the body:
// target length, query values, header count and bytes. A violation is
// counted; the caller answers it.
func (rt *route) checkShape(sh *pathShape, target string, headerCount, headerBytes int) *shape.Violation {
	v := sh.check.CheckTarget(target)
	if v == nil {
		v = sh.check.CheckHeaders(headerCount, headerBytes)
	}
	if v != nil {
		rt.app.metrics.Rejected(string(v.Reason))
	}
	return v
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

// reject answers a request refused by a limit. It keeps the connection
// open (under overload a reconnect costs more than a reply) and, for the
// known reasons, allocates nothing: header values and bodies are prebuilt.
func reject(w http.ResponseWriter, ref refusal) {
	r, ok := rejections[ref.reason]
	if !ok {
		r = newRejectReply(ref.reason)
	}
	retryAfter := ref.retryAfter
	h := w.Header()
	if retryAfter > 0 {
		if retryAfter == time.Second {
			h["Retry-After"] = oneSecond
		} else {
			h["Retry-After"] = []string{retryAfterSeconds(retryAfter)}
		}
	}
	h[forward.HeaderReject] = r.header
	setRateHeaders(h.Set, ref)
	h["Content-Type"] = textPlain
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(ref.code)
	_, _ = w.Write(r.body)
}

// rejectViolation answers a request refused for its shape, with the
// violation's message (it names the limit) as the body.
func rejectViolation(w http.ResponseWriter, v *shape.Violation) {
	h := w.Header()
	h[forward.HeaderReject] = []string{string(v.Reason)}
	h["Content-Type"] = textPlain
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(v.Status)
	_, _ = io.WriteString(w, "levee: rejected: "+v.Msg+"\n")
}

// Shared header values: net/http only reads them; nothing may append to them.
var (
	oneSecond  = []string{"1"}
	textPlain  = []string{"text/plain; charset=utf-8"}
	nosniff    = []string{"nosniff"}
	rejections = map[string]rejectReply{}
)

type rejectReply struct {
	header []string
	body   []byte
}

func newRejectReply(reason string) rejectReply {
	return rejectReply{header: []string{reason}, body: []byte("levee: rejected: " + reason + "\n")}
}

func init() {
	for _, r := range []string{string(admit.QueueFull), string(admit.QueueTimeout), string(admit.Shed),
		string(admit.ClientShare), reasonBody, reasonRate, reasonClientRate, reasonCatalogBusy, reasonCatalogUnavailable} {
		rejections[r] = newRejectReply(r)
	}
}

// retryAfterSeconds renders d as whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

// recorder remembers the status code a handler wrote, for metrics.
// Unwrap lets http.ResponseController reach Flush and Hijack underneath.
type recorder struct {
	http.ResponseWriter
	code int
}

var recorders = sync.Pool{New: func() any { return new(recorder) }}

func newRecorder(w http.ResponseWriter) *recorder {
	rec := recorders.Get().(*recorder)
	rec.ResponseWriter, rec.code = w, 0
	return rec
}

func (rec *recorder) free() {
	rec.ResponseWriter = nil
	recorders.Put(rec)
}

func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 || (rec.code >= 100 && rec.code < 200 && rec.code != http.StatusSwitchingProtocols) {
		rec.code = code
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return rec.ResponseWriter.Write(p)
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// Status is the status written so far (0: none), for the balancer.
func (rec *recorder) Status() int { return rec.code }

// status is the code to record: what was written, or 499 if the client
// left before anything was.
func (rec *recorder) status(r *http.Request) int {
	if rec.code == 0 {
		if r.Context().Err() != nil {
			return StatusClientClosed
		}
		return http.StatusOK
	}
	return rec.code
}
