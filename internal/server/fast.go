package server

import (
	"bytes"
	"errors"
	"math"
	"net"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/shape"
)

// fastServer is the fasthttp engine of one listener (engine: fasthttp):
// HTTP/1.1 only, streaming request bodies, header names and paths passed
// through as sent. It calls the same core as ServeHTTP.
func (s *Server) fastServer(cfg *config.Config) *fasthttp.Server {
	sc := cfg.Server
	readTimeout := sc.ReadTimeout.D()
	return &fasthttp.Server{
		Handler:      s.serveFast,
		ErrorHandler: fastParseError,
		// fasthttp's ReadTimeout runs from the first byte of a request: it is
		// the header timeout here, and the body gets read_timeout once the
		// headers are in.
		ReadTimeout: sc.ReadHeaderTimeout.D(),
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: readTimeout}
		},
		WriteTimeout: sc.WriteTimeout.D(),
		IdleTimeout:  sc.IdleTimeout.D(),
		// The read buffer holds the request line and headers: its size is the
		// header limit (larger requests get 431 from fastParseError).
		ReadBufferSize: int(sc.MaxHeaderBytes),
		// Open connections are bounded at accept by limitListener; this only
		// keeps fasthttp's own default (256k) from being the tighter bound.
		Concurrency: sc.MaxConns,
		// Bodies stream and limits.body is levee's; fasthttp buffers none.
		MaxRequestBodySize:            math.MaxInt,
		StreamRequestBody:             true,
		DisableHeaderNamesNormalizing: true,
		DisablePreParseMultipartForm:  true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		CloseOnShutdown:               true,
		Logger:                        s.errlog.StdLogger("fasthttp"),
	}
}

// fastParseError answers a request fasthttp could not read.
func fastParseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		ctx.Error("levee: request headers too large\n", fasthttp.StatusRequestHeaderFieldsTooLarge)
	} else {
		ctx.Error("levee: bad request\n", fasthttp.StatusBadRequest)
	}
	ctx.SetConnectionClose()
}

// serveFast is the request path on the fasthttp engine: route, shape,
// admit, forward, observe, as ServeHTTP.
func (s *Server) serveFast(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	if smuggling(h) {
		fastParseError(ctx, errSmuggling)
		return
	}
	snap := s.current.Load()
	rt, ok := snap.catalog.Lookup(b2s(h.Host()), b2s(ctx.Path()))
	if !ok && s.lazy != nil {
		var ref refusal
		if rt, ref, ok = s.routeStored(ctx, b2s(h.Host()), b2s(ctx.Path())); ref.code != 0 {
			rejectFast(ctx, ref)
			s.unrouted.Observe(ref.code, 0)
			return
		}
	}
	if !ok {
		ctx.Error("levee: no app for this host and path\n", fasthttp.StatusNotFound)
		ctx.Response.Header.Set(forward.HeaderError, "no-route")
		s.unrouted.Observe(fasthttp.StatusNotFound, 0)
		return
	}
	start := s.clk.Now()
	var code int
	sh := rt.shapes.forPath(b2s(ctx.Path()))
	count, size := fastHeaderSize(h)
	if v := rt.checkShape(sh, b2s(h.RequestURI()), count, size); v != nil {
		rejectViolationFast(ctx, v)
		code = v.Status
	} else {
		code = s.forwardFast(ctx, rt, sh, start)
	}
	end := s.clk.Now()
	took := end.Sub(start)
	rt.app.metrics.Observe(code, took.Seconds())
	if rt.top != nil {
		var buf [net.IPv6len * 4]byte
		rt.top.Observe(topFast(rt.clientKey, ctx, &buf), rejectedFast(ctx), end)
	}
	if snap.access {
		s.log.Info("access", "app", rt.app.name, "method", string(h.Method()), "host", string(h.Host()),
			"path", string(ctx.Path()), "status", code, "duration", took, "remote", ctx.RemoteAddr().String())
	}
}

// forwardFast admits and forwards a routed request; it returns the status
// to record.
func (s *Server) forwardFast(ctx *fasthttp.RequestCtx, rt *route, sh *pathShape, start time.Time) int {
	n := int64(ctx.Request.Header.ContentLength())
	if n < 0 {
		n = -1 // chunked: limits.body is enforced while streaming
	}
	// ctx is a context.Context whose Done closes when the server shuts down.
	// fasthttp does not report a client that goes away while queued: such a
	// request waits out its place in the queue (at most queue.max_wait).
	var client string
	if rt.needsClient() {
		client = rt.clientKey.Fast(ctx)
	}
	// fasthttp's response may be gone by the time the slot is released (a
	// streamed body's end), so an adaptive limit samples latency only.
	slot, ref, ok := s.enter(ctx, rt, b2s(ctx.Path()), client, n, sh.body, start, nil)
	if !ok {
		if ref.code == 0 { // the server is shutting down: close, answer nothing
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(net.Conn) {})
			return StatusClientClosed
		}
		rejectFast(ctx, ref)
		return ref.code
	}
	rt.pool.ServeFast(ctx, sh.body, sh.check, slot) // releases the slot
	if ctx.Hijacked() {
		return fasthttp.StatusSwitchingProtocols
	}
	return ctx.Response.StatusCode()
}

// rejectFast is reject for the fasthttp engine; it allocates nothing for
// the known reasons.
func rejectFast(ctx *fasthttp.RequestCtx, ref refusal) {
	r, ok := rejections[ref.reason]
	if !ok {
		r = newRejectReply(ref.reason)
	}
	rh := &ctx.Response.Header
	if ref.retryAfter > 0 {
		if ref.retryAfter == time.Second {
			rh.Set("Retry-After", oneSecond[0])
		} else {
			rh.Set("Retry-After", retryAfterSeconds(ref.retryAfter))
		}
	}
	rh.Set(forward.HeaderReject, r.header[0])
	setRateHeaders(rh.Set, ref)
	rh.Set("Content-Type", textPlain[0])
	rh.Set("X-Content-Type-Options", nosniff[0])
	ctx.SetStatusCode(ref.code)
	ctx.SetBody(r.body)
}

var errSmuggling = errors.New("server: request with both Content-Length and Transfer-Encoding")

// smuggling reports a request framed two ways (RFC 9112 §6.3): fasthttp
// reads such a body as chunked and closes the connection afterwards, but a
// proxy must refuse it, or the backend might read the framing differently.
func smuggling(h *fasthttp.RequestHeader) bool {
	if h.ContentLength() != -1 { // not chunked
		return false
	}
	for _, line := range bytes.Split(h.RawHeaders(), []byte("\n")) {
		if len(line) >= len("content-length:") && bytes.EqualFold(line[:len("content-length:")], []byte("content-length:")) {
			return true
		}
	}
	return false
}

// b2s views b as a string without copying; the string must not outlive b
// (the catalog lookup does not keep it).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// fastHeaderSize counts a fasthttp request's header fields and their bytes
// (names and values, Host included), as shape.HeaderSize does for net/http.
func fastHeaderSize(h *fasthttp.RequestHeader) (count, size int) {
	for k, v := range h.All() {
		count++
		size += len(k) + len(v)
	}
	return count, size
}

// rejectViolationFast is rejectViolation for the fasthttp engine.
func rejectViolationFast(ctx *fasthttp.RequestCtx, v *shape.Violation) {
	ctx.SetStatusCode(v.Status)
	rh := &ctx.Response.Header
	rh.Set(forward.HeaderReject, string(v.Reason))
	rh.Set("Content-Type", textPlain[0])
	rh.Set("X-Content-Type-Options", nosniff[0])
	ctx.SetBodyString("levee: rejected: " + v.Msg + "\n")
	if v.Status == fasthttp.StatusRequestHeaderFieldsTooLarge || v.Status == fasthttp.StatusRequestURITooLong {
		return
	}
	ctx.SetConnectionClose() // the body is left unread
}
