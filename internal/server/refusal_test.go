package server

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/reply"

	"github.com/leveeproxy/levee/internal/netlimit"
)

// refusalCase is one reason levee refuses a request for, set up on an
// in-process server: no network, the HTTP/1.1 (fasthttp) handler alone.
type refusalCase struct {
	reason, limits string
	status         int
	hold           func(tb testing.TB, a *apps.View) // takes what the refusal needs held
	req            func(h *fasthttp.RequestHeader)
}

var refusalCases = []refusalCase{
	{reason: "queue-full", limits: "limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}}", status: 503,
		hold: func(tb testing.TB, a *apps.View) { mustAcquire(tb, a.Limiter, admit.Ticket{}) }},
	{reason: "client-share", limits: "limits: {concurrency: 2, fair_share: true, queue: {max_len: 4, max_wait: 1s}}", status: 503,
		hold: func(tb testing.TB, a *apps.View) {
			mustAcquire(tb, a.Limiter, admit.Ticket{Client: "10.0.0.1"})
			mustAcquire(tb, a.Limiter, admit.Ticket{Client: "10.0.0.2"})
			// No slot is free, and 10.0.0.1 holds its share (2 ÷ 2 clients).
		}},
	{reason: "body", limits: "limits: {body: 10}", status: 413,
		req: func(h *fasthttp.RequestHeader) { h.SetMethod("POST"); h.SetContentLength(100) }},
	{reason: "rate", limits: "limits: {rate: 1/m, burst: 1}", status: 429},
	{reason: "client-rate", limits: "limits: {client: {rate: 1/m, burst: 1}}", status: 429},
	{reason: "url-length", limits: "limits: {url_length: 10}", status: 414,
		req: func(h *fasthttp.RequestHeader) { h.SetRequestURI(longURI) }},
	{reason: "query-values", limits: "limits: {query_values: 1}", status: 414,
		req: func(h *fasthttp.RequestHeader) { h.SetRequestURI("/?a=1&b=2") }},
	{reason: "header-count", limits: "limits: {header_count: 2}", status: 431,
		req: func(h *fasthttp.RequestHeader) { h.Set("X-A", "1"); h.Set("X-B", "2") }},
	{reason: "header-bytes", limits: "limits: {header_bytes: 64}", status: 431,
		req: func(h *fasthttp.RequestHeader) { h.Set("X-A", longValue) }},
	{reason: "backend-client-share", limits: "backend_limits: {inflight: 1}", status: 503,
		hold: func(tb testing.TB, a *apps.View) {
			if _, err := a.Guard.Enter(tb.Context(), "10.0.0.1", time.Now()); err != nil {
				tb.Fatal(err)
			}
		}},
	{reason: "backend-rate", limits: "backend_limits: {rate: 1/m, burst: 1}", status: 503},
	{reason: "no-route", status: 404,
		req: func(h *fasthttp.RequestHeader) { h.SetHost("nobody.test") }},
	// Framing refusals (package framing), before routing.
	{reason: "http-version", status: 505, req: func(h *fasthttp.RequestHeader) { h.SetProtocol("HTTP/2.0") }},
	{reason: "connect", status: 501, req: func(h *fasthttp.RequestHeader) { h.SetMethod("CONNECT") }},
	{reason: "bad-target", status: 400, req: func(h *fasthttp.RequestHeader) { h.SetRequestURI("/x#y") }},
	{reason: "bad-host", status: 400, req: func(h *fasthttp.RequestHeader) { h.SetHost("a@b") }},
}

var longURI, longValue = "/" + strings.Repeat("x", 20), strings.Repeat("a", 100)

// BenchmarkRefusal is the CPU of each refusal on the HTTP/1.1 handler
// alone, for docs/benchmarks.md beside a proxied request's.
func BenchmarkRefusal(b *testing.B) {
	for _, rc := range refusalCases {
		b.Run(rc.reason, func(b *testing.B) {
			p, ctx := refusalServer(b, rc)
			refusalRequest(p, ctx, rc) // may pass: spends a burst
			b.ReportAllocs()
			for b.Loop() {
				refusalRequest(p, ctx, rc)
			}
			checkRefusal(b, ctx, rc)
		})
	}
}

func refusalServer(tb testing.TB, rc refusalCase) (*Server, *fasthttp.RequestCtx) {
	tb.Helper()
	cfg := "apps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n"
	if rc.limits != "" {
		cfg += "    " + rc.limits + "\n"
	}
	p := New(mustParse(tb, cfg), Options{})
	if rc.hold != nil {
		rc.hold(tb, p.view("a"))
	}
	ctx := new(fasthttp.RequestCtx)
	// A connection as the listener makes them: the peer's address formatted once.
	ctx.Init2(netlimit.Wrap(fakeConn{}), nil, false)
	return p, ctx
}

func refusalRequest(p *Server, ctx *fasthttp.RequestCtx, rc refusalCase) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	h := &ctx.Request.Header
	h.SetHost("a.test")
	h.SetRequestURI("/")
	if rc.req != nil {
		rc.req(h)
	}
	readAsServed(h)
	p.serveFast(ctx)
}

// The scratch of readAsServed: refusal tests run one at a time.
var (
	servedRaw    []byte
	servedReader bytes.Reader
	servedBuf    = bufio.NewReaderSize(nil, 8<<10)
)

// readAsServed reads h again from its own bytes, as the server reads a
// request, so that it has what a head read off the wire has (its fields
// as sent: AllInOrder), allocating nothing once warm.
func readAsServed(h *fasthttp.RequestHeader) {
	servedRaw = h.AppendBytes(servedRaw[:0])
	servedReader.Reset(servedRaw)
	servedBuf.Reset(&servedReader)
	if err := h.Read(servedBuf); err != nil {
		panic("re-reading a test request: " + err.Error())
	}
}

func checkRefusal(tb testing.TB, ctx *fasthttp.RequestCtx, rc refusalCase) {
	tb.Helper()
	rh := &ctx.Response.Header
	header := reply.For(rc.reason).Header
	if got := ctx.Response.StatusCode(); got != rc.status || string(rh.Peek(header)) != rc.reason {
		tb.Fatalf("status %d %s %q, want %d %q", got, header, rh.Peek(header), rc.status, rc.reason)
	}
	if r := reply.For(rc.reason); r.Header == reply.Error && r.Reason != reply.NoRoute && !ctx.Response.ConnectionClose() {
		tb.Errorf("%s: connection kept after a framing refusal", rc.reason)
	}
	if rc.status == http.StatusServiceUnavailable || rc.status == http.StatusTooManyRequests {
		if len(rh.Peek("Retry-After")) == 0 {
			tb.Errorf("%s: no Retry-After", rc.reason)
		}
	}
	if string(rh.Peek("X-Content-Type-Options")) != "nosniff" {
		tb.Errorf("%s: no X-Content-Type-Options: nosniff", rc.reason)
	}
}

func mustAcquire(tb testing.TB, l *admit.Limiter, t admit.Ticket) {
	tb.Helper()
	if err := l.AcquireFor(tb.Context(), t); err != nil {
		tb.Fatal(err)
	}
}

// fakeConn is a connection from 10.0.0.1 that is never read or written.
type fakeConn struct{ net.Conn }

var fakePeer, fakeLocal = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1234}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}

func (fakeConn) RemoteAddr() net.Addr { return fakePeer }
func (fakeConn) LocalAddr() net.Addr  { return fakeLocal }
