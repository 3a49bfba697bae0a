package server

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/deadline"
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
		refuseFraming(w, r, ref)
		s.unrouted.Rejected(ref.Reason)
		s.unrouted.Observe(ref.Status, 0)
		return
	}
	hc, _ := r.Context().Value(h2ConnKey{}).(*h2Conn)
	if hc != nil && r.TLS == nil { // served as unencrypted HTTP/2 under the guard
		r.TLS = hc.tls
	}
	e := httpExchanges.Get().(*httpExchange)
	e.rec.ResponseWriter, e.rec.Code, e.rec.Written, e.R, e.conn = w, 0, 0, r, hc
	e.nItems, e.aborted = 0, false
	e.grpc = isGRPC(r)
	serve(s, e)
	aborted := e.aborted
	e.free()
	if aborted {
		// The backend's answer broke off after part of it was written: a
		// reset stream, so that the client cannot take it for a whole one.
		panic(http.ErrAbortHandler)
	}
}

// httpExchange is a net/http request as serve sees it.
type httpExchange struct {
	// HTTPRequest is what the limits read of the request (R).
	limits.HTTPRequest
	rec limits.Recorder
	// body is the request body as readBody left it (nil: none read), in
	// ahead.
	body    *aheadBody
	ahead   aheadBody
	conn    *h2Conn // nil when not from a listener
	nItems  int     // batch items, as forward counted them
	aborted bool    // the answer broke off after part of it was written
	grpc    bool    // a gRPC call (grpc.go)
	tr      trace.Request
	wait    deadline.Wait // waitCtx's
}

var httpExchanges = sync.Pool{New: func() any { return new(httpExchange) }}

func (e *httpExchange) free() {
	if e.body != nil {
		e.body.head.Free()
		e.ahead = aheadBody{}
	}
	e.R, e.rec.ResponseWriter, e.body, e.conn, e.wait = nil, nil, nil, nil, deadline.Wait{}
	httpExchanges.Put(e)
}

func (e *httpExchange) host() string   { return e.R.Host }
func (e *httpExchange) method() string { return e.R.Method }
func (e *httpExchange) remote() string { return e.R.RemoteAddr }

func (e *httpExchange) ctx() context.Context { return e.R.Context() }

func (e *httpExchange) refuse(ref limits.Refusal) {
	// A request the drain ended before admission was not processed: its
	// stream is refused, which an HTTP/2 client sends again by itself (on
	// a new connection, to the levee that serves now), rather than
	// answered 503 (draining.go).
	if ref.Reason == reply.Draining {
		if rs, ok := e.rec.ResponseWriter.(interface{ RefuseStream() bool }); ok && rs.RefuseStream() {
			return
		}
	}
	if e.grpc {
		ref.GRPC(&e.rec)
		return
	}
	ref.HTTP(&e.rec)
}

func (e *httpExchange) refuseShape(v *shape.Violation) {
	if e.grpc {
		limits.ViolationGRPC(&e.rec, v)
		return
	}
	reply.ViolationHTTP(&e.rec, v, false)
}

func (e *httpExchange) gone() {}

// reused is false: an HTTP/2 stream is answered, whatever came before it.
func (e *httpExchange) reused() bool { return false }

// readBody reads up to request_buffer of r's body before admission; r.Body
// becomes what was read, then (if the body was longer) the rest, still
// timed at min_rate. A whole body goes on with its length.
func (e *httpExchange) readBody(s *Server, rt *route, sh *limits.PathShape) (limits.Refusal, bool) {
	r := e.R
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || e.grpc {
		return limits.Refusal{}, true // a gRPC call's body streams (grpc.go)
	}
	e.tr.Mark(trace.StageBodyRead, s.clk)
	now := time.Now()
	b := &e.ahead // the exchange's: nothing holds it past the request
	*b = aheadBody{rc: *http.NewResponseController(e.rec.ResponseWriter)}
	b.paced = netlimit.PacedReader{R: r.Body, Conn: &b.rc, Rate: s.body.rate, Start: now, Limit: now.Add(s.body.timeout)}
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
			return limits.Refusal{}, false // the client reset the stream: no one to answer
		}
		ref, ok := s.bodyRefusal(rt, sh, r.ContentLength, b.head.Len(), err, r.RemoteAddr)
		if !ok {
			return ref, false
		}
		if done {
			b.r = nil
			r.ContentLength = int64(b.head.Len())
		}
		return ref, true // perhaps with a shadowed body limit
	}
	return limits.Refusal{}, true
}

func (e *httpExchange) readAhead() ([]byte, bool) {
	if e.body == nil {
		return nil, false
	}
	return e.body.head.Bytes(), e.body.r == nil
}

func (e *httpExchange) forward(rt *route, sh *limits.PathShape, slot admit.Releaser, out toBackend) {
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
		admit.Release(slot, StatusClientClosed)
		return
	}
	body := forward.Body{Limit: rt.BodyLimit(sh), Shadow: out.shadow.Header(), Deadline: out.deadline, Items: &e.nItems,
		Trace: forward.TraceHeaders{Traceparent: e.tr.Traceparent(), DropTracestate: e.tr.DropTracestate()}}
	if b := e.body; b != nil {
		// What streams from here holds the slot: timed afresh (see fastExchange).
		b.paced.Start, b.paced.N = time.Now(), 0
		body.Head, body.Whole = b.head.Bytes(), b.r == nil
		if b.r != nil {
			body.Rest = b.r
		}
	}
	e.aborted = rt.pool.ServeRequest(&e.rec, e.R, body, out.check, slot) // releases the slot
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

func (e *httpExchange) describe(sp *trace.Span) trace.HTTPServer {
	r, h := e.R, e.rec.Header()
	v := trace.HTTPServer{Method: r.Method, Path: r.URL.Path, Scheme: "http", Host: r.Host, Proto: "2",
		Client: clientkey.PeerIP(r), UserAgent: r.UserAgent(), Reject: h.Get(reply.Reject), Error: h.Get(reply.Error)}
	if r.TLS != nil {
		v.Scheme = "https"
	}
	if r.ProtoMajor == 1 {
		v.Proto = "1." + strconv.Itoa(r.ProtoMinor)
	}
	if !e.tr.DropTracestate() { // what the backend got (see forward)
		for _, s := range r.Header["Tracestate"] {
			sp.AddTraceState(s)
		}
	}
	return v
}

func (e *httpExchange) status() int    { return e.rec.Final(e.R) }
func (e *httpExchange) rejected() bool { return len(e.rec.Header()[reply.Reject]) > 0 }

func (e *httpExchange) bytes() uint64 {
	n := max(e.R.ContentLength, 0)
	if b := e.body; n == 0 && b != nil { // no length: what was read
		n = int64(b.head.Len()) + b.paced.N
	}
	return uint64(n + e.rec.Written)
}

func (e *httpExchange) items() uint64 { return uint64(e.nItems) }

func (e *httpExchange) rejectReason() string { return e.rec.Header().Get(reply.Reject) }

// aheadBody is a request body read ahead of admission: head, then the
// rest from r (nil: head is all of it), paced at min_rate.
type aheadBody struct {
	head  membuf.Buffer
	r     io.Reader // the rest, paced; nil when head is all
	paced netlimit.PacedReader
	rc    http.ResponseController // paced's Conn
}
