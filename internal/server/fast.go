package server

import (
	"context"
	"errors"
	"io"
	"iter"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/deadline"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/framing"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// fastServer is the fasthttp engine of one listener (engine: fasthttp):
// HTTP/1.1 only, streaming request bodies, header names and paths passed
// through as sent. It calls the same core as ServeHTTP.
func (s *Server) fastServer(cfg *config.Config) *fasthttp.Server {
	sc := cfg.Server
	readTimeout, rate := sc.ReadTimeout.D(), apps.MinRate(sc)
	return &fasthttp.Server{
		Handler:      s.serveFast,
		ErrorHandler: s.fastParseError,
		// fasthttp's ReadTimeout runs from the first byte of a request: it is
		// the header timeout here, and the body gets read_timeout once the
		// headers are in.
		ReadTimeout: sc.ReadHeaderTimeout.D(),
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if h.ContentLength() == 0 {
				// No body to read: the header's deadline stands, and a
				// deadline update (a timer change) per request is saved.
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: prefetchTimeout(h.ContentLength(), readTimeout, rate)}
		},
		WriteTimeout: sc.WriteTimeout.D(),
		IdleTimeout:  sc.IdleTimeout.D(),
		// The read buffer holds the request line and headers: its size is the
		// header limit (larger requests get 431 from fastParseError).
		ReadBufferSize: int(sc.MaxHeaderBytes),
		// Open connections are bounded at accept by netlimit.Listener; this only
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

// fastPrefetch is how much of a body of known length fasthttp reads before
// it calls the handler (readBodyWithStreaming's 8 KiB).
const fastPrefetch = 8 << 10

// prefetchTimeout bounds fasthttp's read of the start of a body of length
// n (-1: chunked, which it does not read ahead) by server.min_rate as well
// as read_timeout: a client that sends its first bytes slowly is cut off
// before levee's own reader, which keeps timing it, takes over.
func prefetchTimeout(n int, readTimeout time.Duration, rate netlimit.MinRate) time.Duration {
	if n <= 0 || rate.Rate <= 0 {
		return readTimeout
	}
	d := rate.Grace + time.Duration(min(n, fastPrefetch))*time.Second/time.Duration(rate.Rate)
	return min(d, readTimeout)
}

// fastParseError answers a request fasthttp could not read, and closes:
// where it ends is unknown.
func (s *Server) fastParseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		fastreply.Write(ctx, framing.HeadersTooLongReply, 0)
	case errors.As(err, &ne) && ne.Timeout():
		// The headers (read_header_timeout), or the start of a body (see
		// prefetchTimeout), did not come in time.
		s.unrouted.Rejected(reply.RequestTimeout)
		fastreply.Write(ctx, reply.RequestTimeoutReply, 0)
	default:
		fastreply.Write(ctx, framing.BadRequestReply, 0)
	}
	ctx.SetConnectionClose()
	netlimit.Linger(ctx.Conn())
}

// serveFast is the request path on fasthttp (HTTP/1.x connections): the
// adapter of serve. A request not in one unambiguous form is refused before
// anything reads it, and its connection closed (package framing).
func (s *Server) serveFast(ctx *fasthttp.RequestCtx) {
	if ctx.ConnRequestNum() == 1 {
		netlimit.Started(ctx.Conn()) // see AwaitFirstRequests
	}
	if r := framing.Fast(&ctx.Request); r != nil {
		fastreply.Write(ctx, r, 0)
		ctx.SetConnectionClose()
		netlimit.Linger(ctx.Conn())
		s.unrouted.Rejected(r.Reason)
		s.unrouted.Observe(r.Status, 0)
		return
	}
	if s.serveACMEFast(ctx) { // before routing: no app, no limits
		return
	}
	e := fastExchanges.Get().(*fastExchange)
	e.c, e.left = ctx, false
	e.pc.Bind(ctx, &s.peers)
	e.whole, e.paced.R, e.nItems = false, nil, 0
	if r := loopReqOf(ctx.Conn()); r != nil && r.pre.rt != nil {
		servePassed(s, e, &r.pre) // routed and checked in the event loop
	} else {
		serve(s, e)
	}
	if ctx.Request.Header.ContentLength() == -1 && !e.chunk.done {
		// A chunked body levee did not read to its end (refused before
		// it was read, or answered early) is not left to fasthttp's
		// lenient decoder to skip: where it ends is levee's to say.
		ctx.SetConnectionClose()
	}
	if ctx.Response.ConnectionClose() {
		// A refusal that closes leaves part of the request unread.
		netlimit.Linger(ctx.Conn())
	}
	e.pc.Finish()
	e.body.Free()
	e.c, e.paced, e.chunk, e.wait = nil, netlimit.PacedReader{}, strictChunked{}, deadline.Wait{}
	fastExchanges.Put(e)
}

// fastExchange is a fasthttp request as serve sees it.
type fastExchange struct {
	c    *fasthttp.RequestCtx
	left bool // gone: no one to answer
	pc   netlimit.PeerCtx
	// ip holds the peer's address written out, for TopKey's view.
	ip [net.IPv6len * 4]byte
	// The request body as readBody left it: read ahead (body), whole or
	// not; the rest, paced at min_rate, from paced.
	body   membuf.Buffer
	whole  bool
	paced  netlimit.PacedReader
	chunk  strictChunked // a chunked body's decoder
	nItems int           // batch items, as forward counted them
	tr     trace.Request
	in     trace.Incoming // incomingTrace's
	wait   deadline.Wait  // waitCtx's
}

var fastExchanges = sync.Pool{New: func() any { return new(fastExchange) }}

func (e *fastExchange) host() string   { return b2s(e.c.Request.Header.Host()) }
func (e *fastExchange) Path() string   { return b2s(e.c.Path()) }
func (e *fastExchange) Target() string { return b2s(e.c.Request.Header.RequestURI()) }
func (e *fastExchange) method() string { return string(e.c.Request.Header.Method()) }
func (e *fastExchange) remote() string { return e.c.RemoteAddr().String() }

func (e *fastExchange) Headers() (int, int) { return headerSize(e.c.Request.Header.AllInOrder()) }

func (e *fastExchange) ContentLength() int64 {
	if n := e.c.Request.Header.ContentLength(); n >= 0 {
		return int64(n)
	}
	return -1 // chunked (or identity to the close): limits.body is enforced while streaming
}

func (e *fastExchange) ClientKey(k clientkey.Source) string { return forward.FastKey(k, e.c) }

func (e *fastExchange) TopKey(k clientkey.Source) string {
	if k.IsHeader() {
		if v := forward.FastKeyView(k, e.c); len(v) > 0 {
			return b2s(v) // a view: the sketch copies a key only when it keeps it
		}
	}
	if ip := netlimit.PeerIPOf(e.c.Conn()); ip != "" {
		return ip // formatted once per connection
	}
	ip, ok := netip.AddrFromSlice(e.c.RemoteIP())
	if !ok {
		return ""
	}
	return b2s(ip.Unmap().AppendTo(e.ip[:0]))
}

// ctx ends when the server shuts down or, once a step waits on it, when
// the client closes its connection (see netlimit.PeerCtx).
func (e *fastExchange) ctx() context.Context { return &e.pc }

func (e *fastExchange) refuse(ref limits.Refusal) { fillRefusal(&e.c.Response, &ref) }

func (e *fastExchange) refuseShape(v *shape.Violation) { fastreply.Violation(e.c, v, false) }

// gone closes the connection without an answer: the client left (or the
// server is shutting down before the request was routed; a request that
// waited in a queue is answered instead: draining.go). fasthttp then writes nothing and closes the
// connection, which the client may have closed already.
func (e *fastExchange) gone() {
	e.left = true
	e.c.HijackSetNoResponse(true)
	e.c.Hijack(func(net.Conn) {})
}

func (e *fastExchange) reused() bool {
	if r := loopReqOf(e.c.Conn()); r != nil {
		return r.sock.c.Requests > 1 // fasthttp serves it as a connection of one request
	}
	return e.c.ConnRequestNum() > 1
}

// readBody reads up to request_buffer of the body into e.body; the rest,
// if any, streams later from e.paced, which keeps timing the client.
func (e *fastExchange) readBody(s *Server, rt *route, sh *limits.PathShape) (limits.Refusal, bool) {
	declared := int64(e.c.Request.Header.ContentLength()) // -1: chunked
	var bs io.Reader = e.c.RequestBodyStream()
	if declared == 0 || bs == nil {
		return limits.Refusal{}, true
	}
	if declared < 0 { // chunked: decoded by levee, strictly
		e.chunk.start(bs)
		bs = &e.chunk
	}
	now := time.Now()
	e.paced = netlimit.PacedReader{R: bs, Conn: e.c.Conn(), Rate: s.body.rate, Start: now,
		Limit: now.Add(s.body.timeout)}
	e.tr.Mark(trace.StageBodyRead, s.clk)
	limit := aheadLimit(rt, sh, declared)
	if limit <= 0 {
		return limits.Refusal{}, true
	}
	e.body.Init(s.buffers)
	done, err := e.body.Fill(&e.paced, int(limit))
	e.whole = done || declared > 0 && int64(e.body.Len()) == declared
	return s.bodyRefusal(rt, sh, declared, e.body.Len(), err, e.remote())
}

func (e *fastExchange) readAhead() ([]byte, bool) { return e.body.Bytes(), e.whole }

func (e *fastExchange) forward(rt *route, sh *limits.PathShape, slot admit.Releaser, out toBackend) {
	// Admitted: nothing waits on ctx any more, so the client is not watched.
	e.pc.Pause()
	// What streams from here holds the slot: it is timed afresh, so the
	// bytes read ahead bank no time for it.
	e.paced.Start, e.paced.N = time.Now(), 0
	body := forward.Body{Limit: rt.BodyLimit(sh), Head: e.body.Bytes(), Whole: e.whole, Shadow: out.shadow.Header(), Deadline: out.deadline,
		Items: &e.nItems, Trace: forward.TraceHeaders{Traceparent: e.tr.Traceparent(), DropTracestate: e.tr.DropTracestate()},
		Loop: out.loop}
	if e.paced.R != nil {
		body.Rest = &e.paced
	}
	rt.pool.ServeFast(e.c, body, out.check, slot) // releases the slot
}

func (e *fastExchange) status() int {
	switch {
	case e.left:
		return StatusClientClosed
	case e.c.Hijacked():
		return fasthttp.StatusSwitchingProtocols
	}
	return e.c.Response.StatusCode()
}

func (e *fastExchange) rejected() bool {
	return len(e.c.Response.Header.Peek(reply.Reject)) > 0
}

func (e *fastExchange) bytes() uint64 {
	n := max(e.c.Request.Header.ContentLength(), 0)
	if n == 0 && e.body.Len() > 0 { // chunked: what was read
		n = e.body.Len() + int(e.paced.N)
	}
	resp := &e.c.Response
	if resp.IsBodyStream() {
		n += max(resp.Header.ContentLength(), 0)
	} else {
		n += len(resp.Body())
	}
	return uint64(n)
}

func (e *fastExchange) items() uint64 { return uint64(e.nItems) }

func (e *fastExchange) rejectReason() string { return string(e.c.Response.Header.Peek(reply.Reject)) }

func (e *fastExchange) traceState() *trace.Request { return &e.tr }

func (e *fastExchange) incomingTrace() trace.Incoming {
	// Gathered in the exchange: a local captured by the loop would escape.
	incomingOf(&e.in, e.c.Request.Header.All())
	return e.in
}

func (e *fastExchange) describe(sp *trace.Span) trace.HTTPServer {
	h := &e.c.Request.Header
	v := trace.HTTPServer{Method: b2s(h.Method()), Path: b2s(e.c.Path()), Scheme: "http", Host: b2s(h.Host()),
		Proto: "1.0", UserAgent: b2s(h.UserAgent()),
		Reject: b2s(e.c.Response.Header.Peek(reply.Reject)), Error: b2s(e.c.Response.Header.Peek(reply.Error))}
	if e.c.IsTLS() {
		v.Scheme = "https"
	}
	if h.IsHTTP11() {
		v.Proto = "1.1"
	}
	if ip, ok := netip.AddrFromSlice(e.c.RemoteIP()); ok {
		v.Client = b2s(ip.Unmap().AppendTo(e.ip[:0]))
	}
	addTraceStates(sp, &e.tr, h.All())
	return v
}

// b2s views b as a string without copying; the string must not outlive b
// (the catalog lookup does not keep it).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// headerSize counts a request's header fields as sent and their bytes
// (names and values, Host included), as shape.HeaderSize does for
// net/http: over fasthttp's fields as sent (AllInOrder; All would count a
// Connection an HTTP/1.0 client did not send, and cookies rewritten) or
// the event loop's, which are the same (h1loop's differential fuzz).
func headerSize(fields iter.Seq2[[]byte, []byte]) (count, size int) {
	for k, v := range fields {
		count++
		size += len(k) + len(v)
	}
	return count, size
}
