package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/framing"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
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
	e := httpExchanges.Get().(*httpExchange)
	e.rec.ResponseWriter, e.rec.code, e.r = w, 0, r
	defer e.free()
	serve(s, e)
}

// httpExchange is a net/http request as serve sees it.
type httpExchange struct {
	r   *http.Request
	rec recorder
}

var httpExchanges = sync.Pool{New: func() any { return new(httpExchange) }}

func (e *httpExchange) free() {
	e.r, e.rec.ResponseWriter = nil, nil
	httpExchanges.Put(e)
}

func (e *httpExchange) host() string   { return e.r.Host }
func (e *httpExchange) path() string   { return e.r.URL.Path }
func (e *httpExchange) target() string { return e.r.RequestURI }
func (e *httpExchange) method() string { return e.r.Method }
func (e *httpExchange) remote() string { return e.r.RemoteAddr }

// headers counts Host too: net/http keeps it apart from the header map.
func (e *httpExchange) headers() (int, int) {
	count, size := shape.HeaderSize(e.r.Header)
	return count + 1, size + len("Host") + len(e.r.Host)
}

func (e *httpExchange) contentLength() int64 { return e.r.ContentLength }

func (e *httpExchange) clientKey(k forward.KeySource) string { return k.HTTP(e.r) }

func (e *httpExchange) topKey(k forward.KeySource) string {
	if k.IsHeader() {
		if v := k.HTTP(e.r); v != "" {
			return v
		}
	}
	return forward.PeerIP(e.r)
}

func (e *httpExchange) ctx() context.Context { return e.r.Context() }

func (e *httpExchange) refuse(ref refusal) {
	r := reply.For(ref.reason)
	if ref.rate != nil {
		// A rate refusal's RateLimit fields; net/http's header map takes
		// them as fresh []string values (HTTP/2 allocates per request anyway).
		h := e.rec.Header()
		h.Set("RateLimit-Policy", ref.rate.policy.Header())
		h.Set("RateLimit", string(ref.rate.policy.AppendRateLimit(nil, ref.decision)))
	}
	r.HTTP(&e.rec, ref.retryAfter)
}

func (e *httpExchange) refuseShape(v *shape.Violation) { reply.ViolationHTTP(&e.rec, v, false) }

func (e *httpExchange) gone() {}

func (e *httpExchange) forward(rt *route, sh *pathShape, slot forward.Releaser) {
	// Deferred: ReverseProxy aborts with a panic mid-body.
	defer func() { forward.Release(slot, e.rec.code) }()
	r := e.r
	if r.ContentLength < 0 { // unknown length: enforce the limit while streaming
		r.Body = forward.GuardBody(http.MaxBytesReader(&e.rec, r.Body, sh.body))
	}
	rt.pool.Serve(&e.rec, r, sh.check)
}

func (e *httpExchange) status() int    { return e.rec.status(e.r) }
func (e *httpExchange) rejected() bool { return len(e.rec.Header()[reply.Reject]) > 0 }

// recorder remembers the status code a handler wrote, for metrics.
// Unwrap lets http.ResponseController reach Flush and Hijack underneath.
type recorder struct {
	http.ResponseWriter
	code int
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
