package limits

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/topk"
)

// NewStore returns an in-process rate store of maxKeys keys (validated).
func NewStore(maxKeys int) *ratelimit.LocalStore {
	st, err := ratelimit.NewLocalStore(ratelimit.Options{MaxKeys: maxKeys})
	if err != nil { // validated config: a broken invariant
		panic("limits: rate store: " + err.Error())
	}
	return st
}

// Handler applies validated limits to the requests of a net/http handler
// through a Gate, in the proxy's order, and refuses as the proxy's
// net/http engine does: Check (shape, rate, a declared body), then Admit
// (concurrency, queue, priorities, fair share, adaptive), then the body's
// own limits (limits.body without a declared length, limits.batch) as the
// handler reads it. It is safe for concurrent use; it starts no goroutine.
type Handler struct {
	gate     *Gate // its Count is a *Counts
	next     http.Handler
	top      *topk.ClientTop
	bodyErr  func(reason string) error
	tooLarge *bodyRefusal // limits.body's, shared
}

// NewHandler returns a Handler of g, to be given its handler by With. g
// is filled (by internal/limitsconf, from validated limits) and not
// changed after; NewHandler sets its Count to the handler's own Counts,
// and its Clock, if nil, to the real clock. top is the handler's heavy
// hitters (nil: none). bodyErr makes the error a body read fails with
// when a limit refuses the body (nil: an *admit.Rejection of the reason);
// its error for limits.body is made once and shared.
func NewHandler(g *Gate, top *topk.ClientTop, bodyErr func(reason string) error) *Handler {
	if g.Clock == nil {
		g.Clock = clock.Real{}
	}
	if bodyErr == nil {
		bodyErr = func(reason string) error { return &admit.Rejection{Reason: admit.Reason(reason)} }
	}
	g.Count = NewCounts()
	return &Handler{gate: g, top: top, bodyErr: bodyErr,
		tooLarge: &bodyRefusal{reply: reply.BodyCutReply, err: bodyErr(reply.Body)}}
}

// With returns a handler of next sharing h's limits and their state.
func (h *Handler) With(next http.Handler) *Handler {
	c := *h
	c.next = next
	return &c
}

// Limiter is the handler's concurrency limiter (for its gauges).
func (h *Handler) Limiter() *admit.Limiter { return h.gate.Limiter }

// Top is the handler's heavy hitters (nil when limits.client.top_k is 0).
func (h *Handler) Top() *topk.ClientTop { return h.top }

// Now is the handler's clock's now.
func (h *Handler) Now() time.Time { return h.gate.Clock.Now() }

// Counts are the handler's refusals and shadowed refusals by reason.
func (h *Handler) Counts() *Counts { return h.gate.Count.(*Counts) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := h.gate
	now := g.Clock.Now()
	ex := exchanges.Get().(*exchange)
	ex.start(w, r)
	defer h.done(ex)
	req := HTTPRequest{R: r}
	p, v, ref, ok := Check(g, req, now, nil)
	switch {
	case v != nil:
		reply.ViolationHTTP(&ex.rec, v, false)
		return
	case !ok:
		ref.HTTP(&ex.rec)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		ex.guardBody(h, p.Shape, r)
	}
	reply.MarkShadow(r.Header, p.Shadow.Header()) // as a backend gets it
	slot, ref, ok := g.Admit(r.Context(), g.Ticket(r.URL.Path, p.Client), nil)
	if !ok {
		if ref.Code != 0 {
			ref.HTTP(&ex.rec)
		}
		return // the client went away: no one to answer
	}
	released := false
	defer func() { // deferred: a handler may abort with a panic
		if !released {
			admit.Release(slot, http.StatusInternalServerError)
		}
	}()
	h.next.ServeHTTP(&ex.rec, r)
	ex.rec.finish()
	released = true
	admit.Release(slot, ex.rec.Final(r))
}

// done counts the request in the top clients and recycles ex.
func (h *Handler) done(ex *exchange) {
	if h.top != nil {
		key := HTTPRequest{R: ex.r}.TopKey(h.gate.ClientKey)
		bytes, items := ex.counted()
		h.top.Observe(key, len(ex.rec.Header()[reply.Reject]) > 0, bytes, uint64(items), h.gate.Clock.Now())
	}
	ex.free()
}

// exchange is one request through a Handler: the response as the handler
// writes it, and the body as it reads it.
type exchange struct {
	r    *http.Request
	rec  refusingWriter
	body *guardedBody // nil: the body is not guarded
}

var exchanges = sync.Pool{New: func() any { return new(exchange) }}

func (ex *exchange) start(w http.ResponseWriter, r *http.Request) {
	ex.r, ex.body = r, nil
	ex.rec = refusingWriter{Recorder: Recorder{ResponseWriter: w}}
}

func (ex *exchange) free() {
	*ex = exchange{}
	exchanges.Put(ex)
}

// counted is the request's body bytes (as read, when guarded) and the
// response's written, and the batch items counted.
func (ex *exchange) counted() (bytes uint64, items int) {
	n := max(ex.r.ContentLength, 0)
	if ex.body != nil {
		n, items = ex.body.progress()
	}
	return uint64(n + ex.rec.Written), items
}

// guardBody enforces on r's body, as the handler reads it, what could not
// be checked from the head: limits.body without a declared length, and
// limits.batch (or their shadows).
func (ex *exchange) guardBody(h *Handler, sh *PathShape, r *http.Request) {
	g := h.gate
	batch := sh.Check.Limits().Batch.On()
	if r.ContentLength >= 0 && !batch {
		return // a declared length was checked; nothing to count
	}
	limit, bc := g.BodyLimit(sh), sh.Check.BatchCounter()
	// Not pooled with the exchange: a handler may hand the body on (to a
	// goroutine that outlives it, say), and it must never read another
	// request's state.
	ex.body = &guardedBody{rc: r.Body, limit: limit, batch: bc, h: h, shadowAt: -1}
	if limit == UnlimitedBody && r.ContentLength < 0 {
		ex.body.shadowAt = sh.Body // limits.body shadowed: counted when crossed
	}
	ex.rec.body = ex.body
	r.Body = ex.body
}

// guardedBody is a request body read by the wrapped handler under the
// limits that only its bytes show. A read over one fails with the
// handler's bodyErr of its reason, and the refusal is answered in place of
// what the handler writes.
type guardedBody struct {
	rc      io.ReadCloser
	limit   int64
	h       *Handler
	refused atomic.Pointer[bodyRefusal] // set once

	mu       sync.Mutex // Read and the top's count may run at once
	n        int64
	shadowAt int64               // a shadowed limits.body, counted once when n crosses it; -1: none
	batch    *shape.BatchCounter // nil: not counted (off, or shadowed and over)
	items    int
	eof      bool
}

// progress is the bytes read so far, and the items counted.
func (b *guardedBody) progress() (int64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.items
}

// bodyRefusal is the answer to a body over a limit.
type bodyRefusal struct {
	reply *reply.Reply     // limits.body
	v     *shape.Violation // limits.batch
	err   error
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if ref := b.refused.Load(); ref != nil {
		return 0, ref.err
	}
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(n)
	if b.n > b.limit {
		return 0, b.refuse(b.h.tooLarge, reply.Body)
	}
	if b.shadowAt >= 0 && b.n > b.shadowAt {
		b.h.gate.Shadows(reply.Body)
		b.shadowAt = -1
	}
	if b.batch == nil {
		return n, err
	}
	v := b.batch.Write(p[:n])
	if v == nil && err == io.EOF && !b.eof {
		b.eof = true
		v = b.batch.End()
	}
	if v != nil {
		if _, ok := b.h.gate.Shadows(string(v.Reason)); !ok {
			return 0, b.refuse(&bodyRefusal{v: v, err: b.h.bodyErr(string(v.Reason))}, string(v.Reason))
		}
		b.batch = nil // counted as shadowed; the rest goes on uncounted
		return n, err
	}
	b.items = b.batch.Count()
	return n, err
}

// refuse records the body's refusal (the first), counted.
func (b *guardedBody) refuse(ref *bodyRefusal, reason string) error {
	if b.refused.CompareAndSwap(nil, ref) {
		b.h.gate.Count.Rejected(reason)
	}
	return b.refused.Load().err
}

func (b *guardedBody) Close() error { return b.rc.Close() }

// refusingWriter is the response writer the wrapped handler gets: a
// Recorder that, once the body's reader has refused the body, answers that
// refusal instead of the handler's response, if the handler has written
// nothing yet.
type refusingWriter struct {
	Recorder
	body    *guardedBody
	swallow bool // the body's refusal was answered: the handler's writes go nowhere
}

// intercept answers the body's refusal, if there is one and nothing was
// written; it reports whether the handler's writes are to be dropped.
func (w *refusingWriter) intercept() bool {
	if w.swallow {
		return true
	}
	if w.Code != 0 || w.body == nil {
		return false
	}
	ref := w.body.refused.Load()
	if ref == nil {
		return false
	}
	w.swallow = true
	clear(w.ResponseWriter.Header()) // what the handler set was for its own answer
	if ref.v != nil {
		reply.ViolationHTTP(&w.Recorder, ref.v, true) // the rest of the body is unread
	} else {
		ref.reply.HTTP(&w.Recorder, 0)
	}
	return true
}

func (w *refusingWriter) WriteHeader(code int) {
	if !w.intercept() {
		w.Recorder.WriteHeader(code)
	}
}

func (w *refusingWriter) Write(p []byte) (int, error) {
	if w.intercept() {
		return len(p), nil
	}
	return w.Recorder.Write(p)
}

func (w *refusingWriter) WriteString(p string) (int, error) {
	if w.intercept() {
		return len(p), nil
	}
	return w.Recorder.WriteString(p)
}

// finish answers the body's refusal if the handler returned without
// writing anything.
func (w *refusingWriter) finish() { w.intercept() }
