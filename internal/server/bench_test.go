package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkRejectQueueFull measures the cost of refusing a request at a full
// app (no network: the handler alone). Under overload this is the path most
// requests take, so it must stay far cheaper than serving one.
func BenchmarkRejectQueueFull(b *testing.B) {
	p := benchServer(b, "limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}}")
	a := p.view("a")
	if err := a.Limiter.Acquire(b.Context()); err != nil { // hold the only slot
		b.Fatal(err)
	}
	defer a.Limiter.Release()
	req := originRequest("a.test")
	b.ReportAllocs()
	for b.Loop() {
		w := discardWriter{h: http.Header{}}
		p.ServeHTTP(&w, req)
		if w.code != http.StatusServiceUnavailable {
			b.Fatalf("status %d", w.code)
		}
	}
}

// originRequest is GET / for host as a server reads it: with the
// origin-form target (httptest.NewRequest keeps the absolute URL it is
// given, which framing refuses 400 before any limit is reached).
func originRequest(host string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	r.RequestURI = "/"
	return r
}

// BenchmarkNotFound measures the cost of a request for a host no app claims.
func BenchmarkNotFound(b *testing.B) {
	p := benchServer(b, "")
	req := originRequest("nobody.test")
	b.ReportAllocs()
	for b.Loop() {
		w := discardWriter{h: http.Header{}}
		p.ServeHTTP(&w, req)
		if w.code != http.StatusNotFound {
			b.Fatalf("status %d", w.code)
		}
	}
}

// BenchmarkProxyLoopback measures a whole proxied request over loopback,
// client → levee → backend (ns/op, allocs/op of client and levee together),
// over each protocol (HTTP/1.1 on fasthttp, h2c on net/http), and reports
// the throughput of the same loop sent directly to the backend as
// direct_ratio = proxied req/s ÷ direct req/s, measured in the same run.
func BenchmarkProxyLoopback(b *testing.B) {
	for _, proto := range []string{"http1", "h2c"} {
		b.Run(proto, func(b *testing.B) { benchProxyLoopback(b, proto == "h2c") })
	}
}

func benchProxyLoopback(b *testing.B, h2c bool) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100))
	}))
	defer backend.Close()
	pr := startProxy(b, fmt.Sprintf("listen: [{addr: 127.0.0.1:0, h2c: %t}]\napps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n",
		h2c, strings.TrimPrefix(backend.URL, "http://")))
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	client := &http.Client{Transport: tr}
	run := func(url string, n int) time.Duration {
		start := time.Now()
		for range n {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Host = "a.test"
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return time.Since(start)
	}
	b.ReportAllocs()
	b.ResetTimer()
	proxied := run(pr.URL+"/", b.N)
	b.StopTimer()
	tr.Protocols = nil // the backend speaks HTTP/1.1
	direct := run(backend.URL+"/", b.N)
	b.ReportMetric(float64(direct)/float64(proxied), "direct_ratio")
}

func benchServer(b *testing.B, limits string) *Server {
	b.Helper()
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\napps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n    %s\n", limits)
	return New(mustParse(b, cfg), Options{})
}

// discardWriter is a minimal ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkRejectQueueFullFast is BenchmarkRejectQueueFull on the fasthttp engine.
func BenchmarkRejectQueueFullFast(b *testing.B) {
	p := benchServer(b, "limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}}")
	a := p.view("a")
	if err := a.Limiter.Acquire(b.Context()); err != nil { // hold the only slot
		b.Fatal(err)
	}
	defer a.Limiter.Release()
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, nil, nil) // a ctx with fasthttp's stand-in server
	b.ReportAllocs()
	for b.Loop() {
		fastRequest(&ctx, "a.test")
		p.serveFast(&ctx)
		if ctx.Response.StatusCode() != http.StatusServiceUnavailable {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}

func fastRequest(ctx *fasthttp.RequestCtx, host string) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetHost(host)
	ctx.Request.SetRequestURI("/")
}
