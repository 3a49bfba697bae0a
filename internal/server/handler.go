package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/framing"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// ServeHTTP is the request path on net/http (HTTP/2 connections): the
// adapter of serve. A request that would not reach the backend in one
// unambiguous HTTP/1.1 form is refused first (package framing).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ref := framing.HTTP(r); ref != nil {
		ref.HTTP(w, 0)
		s.unrouted.Rejected(ref.Reason)
		s.unrouted.Observe(ref.Status, 0)
		return
	}
	hc, _ := r.Context().Value(h2ConnKey{}).(*h2Conn)
	if hc != nil && r.TLS == nil { // served as unencrypted HTTP/2 under the guard
		r.TLS = hc.tls
	}
	e := httpExchanges.Get().(*httpExchange)
	e.held.Reset(w)
	e.rec.ResponseWriter, e.rec.Code, e.rec.Written, e.R, e.conn = &e.held, 0, 0, r, hc
	e.nItems = 0
	defer e.free()
	serve(s, e)
}

// httpExchange is a net/http request as serve sees it.
type httpExchange struct {
	// HTTPRequest is what the limits read of the request (R).
	limits.HTTPRequest
	rec  recorder
	held forward.HeldResponse // under rec: a response held until the slot is given back
	// body is the request body as readBody left it (nil: none read).
	body   *aheadBody
	conn   *h2Conn // nil when not from a listener
	nItems int     // batch items, as forward counted them
	tr     trace.Request
}

var httpExchanges = sync.Pool{New: func() any { return new(httpExchange) }}

func (e *httpExchange) free() {
	e.held.Free()
	if e.body != nil {
		e.body.free()
	}
	e.R, e.rec.ResponseWriter, e.body, e.conn = nil, nil, nil, nil
	e.held.Reset(nil)
	httpExchanges.Put(e)
}

func (e *httpExchange) host() string   { return e.R.Host }
func (e *httpExchange) method() string { return e.R.Method }
func (e *httpExchange) remote() string { return e.R.RemoteAddr }

func (e *httpExchange) ctx() context.Context { return e.R.Context() }

func (e *httpExchange) refuse(ref refusal) { ref.HTTP(&e.rec) }

func (e *httpExchange) refuseShape(v *shape.Violation) { reply.ViolationHTTP(&e.rec, v, false) }

func (e *httpExchange) gone() {}

// readBody reads up to request_buffer of r's body before admission; r.Body
// becomes what was read, then (if the body was longer) the rest, still
// timed at min_rate. A whole body goes on with its length.
func (e *httpExchange) readBody(s *Server, rt *route, sh *limits.PathShape) (refusal, bool) {
	r := e.R
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return refusal{}, true
	}
	e.tr.Mark(trace.StageBodyRead, s.clk)
	now := time.Now()
	// Not pooled with the exchange: the Transport may read a request's body
	// after ServeHTTP has returned (a backend that answered first).
	b := &aheadBody{c: r.Body}
	b.paced = netlimit.PacedReader{R: r.Body, Conn: http.NewResponseController(e.held.Unwrap()),
		Rate: rt.body.rate, Start: now, Limit: now.Add(rt.body.timeout)}
	b.r = &b.paced
	e.body = b
	limit := aheadLimit(rt, sh, r.ContentLength)
	if limit == r.ContentLength {
		// One byte more: a stream is whole only at its END_STREAM, and net/http
		// fails the read of DATA past its content-length.
		limit++
	}
	if limit > 0 {
		b.head.Init(s.buffers)
		done, err := b.head.Fill(&b.paced, int(limit))
		if err != nil && r.Context().Err() != nil {
			return refusal{}, false // the client reset the stream: no one to answer
		}
		ref, ok := s.bodyRefusal(rt, sh, r.ContentLength, b.head.Len(), err, r.RemoteAddr)
		if !ok {
			return ref, false
		}
		if done {
			b.r = nil
			r.ContentLength = int64(b.head.Len())
		}
		r.Body = b
		return ref, true // perhaps with a shadowed body limit
	}
	r.Body = b
	return refusal{}, true
}

func (e *httpExchange) readAhead() ([]byte, bool) {
	if e.body == nil {
		return nil, false
	}
	return e.body.head.Bytes(), e.body.r == nil
}

func (e *httpExchange) forward(rt *route, sh *limits.PathShape, slot forward.Releaser, out toBackend) {
	if e.conn != nil && e.conn.Resets() > 0 {
		// The client resets streams, or makes the server reset them
		// (h2guard.Conn.Resets). The frame that resets this one may be
		// read already, waiting for the server's frame loop: let that run
		// first, so that the reset stops this request here.
		runtime.Gosched()
	}
	if e.R.Context().Err() != nil {
		// Reset (or its connection gone) after admission: nothing reaches
		// the backend, and status records 499 with no one to answer.
		forward.Release(slot, StatusClientClosed)
		return
	}
	released := false
	defer func() { // deferred: ReverseProxy aborts with a panic mid-body
		if !released {
			forward.Release(slot, e.rec.Code)
		}
	}()
	r := e.R
	if tp := e.tr.Traceparent(); tp != nil {
		// Levee's span is the backend's parent; the Rewrite's clone of
		// r.Header carries it (tracing off: the client's pass as sent).
		r.Header["Traceparent"] = []string{string(tp)}
		if e.tr.DropTracestate() {
			delete(r.Header, "Tracestate")
		}
	}
	if r.ContentLength < 0 && rt.BodyLimit(sh) == sh.Body { // unknown length: enforce the limit while streaming
		r.Body = forward.GuardBody(http.MaxBytesReader(&e.rec, r.Body, sh.Body))
	}
	// What streams from here holds the slot: timed afresh (see fastExchange).
	if e.body != nil {
		e.body.paced.Start, e.body.paced.N = time.Now(), 0
	}
	e.held.Hold(rt.pool)
	e.serveHeld(rt, r, out)
	// The backend is done: its slot goes back before a held response is
	// written to the client, however slowly that reads.
	released = true
	forward.Release(slot, e.rec.Code)
	e.held.Send()
}

// serveHeld forwards r. ReverseProxy aborts the handler (panics with
// http.ErrAbortHandler) when the backend fails mid-body; if the response
// is still held whole, none of it has reached the client, which then gets
// levee's 502 as on HTTP/1.1 rather than a reset stream. Any other panic
// goes on.
func (e *httpExchange) serveHeld(rt *route, r *http.Request, out toBackend) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler || !e.held.Holding() { //nolint:errorlint // ReverseProxy panics with the value itself
				panic(v)
			}
			e.held.Free()
			clear(e.held.Header())
			e.rec.Code = 0
			reply.BackendUnreachableReply.HTTP(&e.rec, 0)
		}
	}()
	rt.pool.Serve(&e.rec, r, out.check, out.shadow.Header(), &e.nItems)
}

func (e *httpExchange) traceState() *trace.Request { return &e.tr }

func (e *httpExchange) incomingTrace() (in trace.Incoming) {
	tp := e.R.Header["Traceparent"]
	if in.Count = len(tp); in.Count == 1 {
		in.Traceparent = tp[0]
	}
	for _, v := range e.R.Header["Tracestate"] {
		in.State.AddString(v)
	}
	return in
}

func (e *httpExchange) describe(sp *trace.Span) spanView {
	r, h := e.R, e.rec.Header()
	v := spanView{method: r.Method, path: r.URL.Path, scheme: "http", host: r.Host, proto: "2",
		client: forward.PeerIP(r), userAgent: r.UserAgent(), reject: h.Get(reply.Reject), levErr: h.Get(reply.Error)}
	if r.TLS != nil {
		v.scheme = "https"
	}
	if r.ProtoMajor == 1 {
		v.proto = "1." + strconv.Itoa(r.ProtoMinor)
	}
	for _, s := range r.Header["Tracestate"] { // what the backend got (see forward)
		sp.AddTraceState(s)
	}
	return v
}

func (e *httpExchange) status() int    { return e.rec.Final(e.R) }
func (e *httpExchange) rejected() bool { return len(e.rec.Header()[reply.Reject]) > 0 }

func (e *httpExchange) bytes() uint64 {
	n := max(e.R.ContentLength, 0)
	if b := e.body; n == 0 && b != nil { // no length: what was read
		b.mu.Lock() // the Transport may still be reading it
		n = int64(b.head.Len()) + b.paced.N
		b.mu.Unlock()
	}
	return uint64(n + e.rec.Written)
}

func (e *httpExchange) items() uint64 { return uint64(e.nItems) }

func (e *httpExchange) rejectReason() string { return e.rec.Header().Get(reply.Reject) }

// recorder remembers the status code a handler wrote (package limits,
// shared with the admission middleware).
type recorder = limits.Recorder

// aheadBody is a request body read ahead: head, then the rest from r (nil:
// head is all of it). Close closes the original body. free gives the head
// back, after which a read (a Transport's, after ServeHTTP returned) fails
// rather than touch a buffer given to another request.
type aheadBody struct {
	mu    sync.Mutex
	freed bool
	head  membuf.Buffer
	off   int
	r     io.Reader // the rest, paced; nil when head is all
	paced netlimit.PacedReader
	c     io.Closer
}

var errBodyFreed = errors.New("server: request body read after its request ended")

func (b *aheadBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	switch {
	case b.freed:
		b.mu.Unlock()
		return 0, &forward.BadBodyError{Err: errBodyFreed}
	case b.off < b.head.Len():
		n := copy(p, b.head.Bytes()[b.off:])
		b.off += n
		b.mu.Unlock()
		return n, nil
	}
	r := b.r
	b.mu.Unlock()
	if r == nil {
		return 0, io.EOF
	}
	// The rest is read outside the lock: it may wait on the client, and
	// r is this request's own (never reused).
	n, err := r.Read(p)
	if err != nil && err != io.EOF {
		err = &forward.BadBodyError{Err: err}
	}
	return n, err
}

func (b *aheadBody) Close() error { return b.c.Close() }

func (b *aheadBody) free() {
	b.mu.Lock()
	b.freed = true
	b.head.Free()
	b.mu.Unlock()
}
