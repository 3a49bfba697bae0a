package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/netlimit"
)

// gatedBackend holds every request until release is closed, and records how
// many it holds at once and how many connections were opened to it.
type gatedBackend struct {
	*httptest.Server
	release  chan struct{}
	inflight atomic.Int64
	peak     atomic.Int64
	arrived  atomic.Int64
	conns    atomic.Int64
}

func newGatedBackend(t *testing.T) *gatedBackend {
	g := &gatedBackend{release: make(chan struct{})}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := g.inflight.Add(1)
		defer g.inflight.Add(-1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		g.arrived.Add(1)
		io.Copy(io.Discard, r.Body)
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	}))
	g.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			g.conns.Add(1)
		}
	}
	g.Start()
	t.Cleanup(func() {
		g.open()
		g.Close()
	})
	return g
}

var openOnce sync.Map

// open releases every held and future request (idempotent).
func (g *gatedBackend) open() {
	if _, loaded := openOnce.LoadOrStore(g, true); !loaded {
		close(g.release)
	}
}

func (g *gatedBackend) addr() string { return strings.TrimPrefix(g.URL, "http://") }

// waitFor polls cond until it holds or 10 s pass; the deadline only catches
// a hang, it is not a performance assertion.
// waitFor is leaktest.WaitFor with the tests' usual bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	leaktest.WaitFor(t, leaktest.Wait, what, cond)
}

// app is app name's state as last composed (nil: not serving).
func (p *proxy) app(name string) *apps.View { return p.srv.view(name) }

// view is app name's state as last composed (nil: not serving).
func (s *Server) view(name string) *apps.View {
	v, _ := s.apps.Views().Get(name)
	return v
}

// asyncGet sends a GET in the background and delivers the status (or 0 on error).
func (p *proxy) asyncGet(host, path string, out chan<- *http.Response) {
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- &http.Response{StatusCode: 0, Status: err.Error(), Header: http.Header{}, Body: http.NoBody}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- resp
	}()
}

func TestConcurrencyLimitHoldsAtTheBackend(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 4, queue: {max_wait: 30s, max_len: 1000, target: 1m}}
`, be.addr()))
	const n = 60
	results := make(chan *http.Response, n)
	for range n {
		p.asyncGet("a.test", "/", results)
	}
	a := p.app("a")
	waitFor(t, "4 requests at the backend and 56 queued", func() bool {
		return be.inflight.Load() == 4 && a.Limiter.Queued() == n-4
	})
	be.open()
	for range n {
		if r := <-results; r.StatusCode != http.StatusOK {
			t.Errorf("status %d (%s); want 200 for every queued request", r.StatusCode, r.Status)
		}
	}
	if got := be.peak.Load(); got != 4 {
		t.Fatalf("backend saw a peak of %d concurrent requests; want exactly the limit, 4", got)
	}
	if a.Limiter.InFlight() != 0 || a.Limiter.Queued() != 0 {
		t.Fatalf("after the burst: inflight %d queued %d; want 0 0", a.Limiter.InFlight(), a.Limiter.Queued())
	}
}

func TestDefaultLimitsApplyWithoutConfig(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be.addr()))
	lim := p.app("a").Limiter.Limits()
	if lim.Concurrency != 1024 || lim.MaxLen != 1024 || lim.MaxWait != 50*time.Millisecond {
		t.Fatalf("limits without config = %+v; want the documented defaults 1024, 1024, 50ms", lim)
	}
}

func TestQueueFullIsRejectedWithoutDialling(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 2, queue: {max_wait: 30s, max_len: 3, target: 1m}}
`, be.addr()))
	results := make(chan *http.Response, 5)
	for range 5 {
		p.asyncGet("a.test", "/", results)
	}
	a := p.app("a")
	waitFor(t, "2 at the backend, 3 queued", func() bool { return be.inflight.Load() == 2 && a.Limiter.Queued() == 3 })
	conns := be.conns.Load()

	for range 20 {
		resp := p.get("a.test", "/")
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d; want 503 when the queue is full", resp.StatusCode)
		}
		if got := resp.Header.Get("Levee-Reject"); got != "queue-full" {
			t.Fatalf("Levee-Reject = %q; want queue-full", got)
		}
		if got := resp.Header.Get("Retry-After"); got != "1" {
			t.Fatalf("Retry-After = %q; want 1", got)
		}
		if !strings.Contains(body, "queue-full") {
			t.Fatalf("body %q does not name the reason", body)
		}
	}
	if be.arrived.Load() != 2 || be.conns.Load() != conns {
		t.Fatalf("rejections reached the backend: %d requests, %d→%d connections", be.arrived.Load(), conns, be.conns.Load())
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "queue-full"}); got != 20 {
		t.Fatalf("levee_rejected_total{reason=queue-full} = %v; want 20", got)
	}
	be.open()
	for range 5 {
		if r := <-results; r.StatusCode != http.StatusOK {
			t.Fatalf("admitted request got %d", r.StatusCode)
		}
	}
}

func TestQueueTimeoutIsRejected(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_wait: 20ms, max_len: 10}}
`, be.addr()))
	first := make(chan *http.Response, 1)
	p.asyncGet("a.test", "/", first)
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
	resp := p.get("a.test", "/")
	readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Levee-Reject") != "queue-timeout" {
		t.Fatalf("got %d Levee-Reject=%q; want 503 queue-timeout", resp.StatusCode, resp.Header.Get("Levee-Reject"))
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After on a queue timeout")
	}
	be.open()
	if r := <-first; r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", r.StatusCode)
	}
}

func TestBodyLimit(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {body: 1KB}
`, be.addr()))
	send := func(body io.Reader, length int64) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/", body)
		req.Host, req.ContentLength = "a.test", length
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp
	}
	if r := send(strings.NewReader(strings.Repeat("x", 1000)), 1000); r.StatusCode != http.StatusOK {
		t.Fatalf("body at the limit: %d; want 200", r.StatusCode)
	}
	arrived := be.arrived.Load()
	r := send(strings.NewReader(strings.Repeat("x", 1001)), 1001)
	if r.StatusCode != http.StatusRequestEntityTooLarge || r.Header.Get("Levee-Reject") != "body" {
		t.Fatalf("declared body over the limit: %d %q; want 413 body", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	if be.arrived.Load() != arrived {
		t.Fatal("a body declared too large reached the backend")
	}
	// Chunked (no Content-Length): cut off while streaming.
	r = send(io.MultiReader(strings.NewReader(strings.Repeat("x", 5000))), -1)
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit: %d; want 413", r.StatusCode)
	}
	if r := send(io.MultiReader(strings.NewReader(strings.Repeat("x", 1000))), -1); r.StatusCode != http.StatusOK {
		t.Fatalf("chunked body at the limit: %d; want 200", r.StatusCode)
	}
}

func TestHeaderLimit(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	p := startProxy(t, fmt.Sprintf(`
server: {max_header_bytes: 4KiB}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, be.addr()))
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
	req.Host = "a.test"
	req.Header.Set("X-Big", strings.Repeat("y", 8<<10))
	resp, err := http.DefaultClient.Do(req)
	switch {
	case err != nil && testH2C() && (strings.Contains(err.Error(), "COMPRESSION_ERROR") ||
		strings.Contains(err.Error(), "larger than peer's advertised limit")):
		// Go's HTTP/2 server bounds each HPACK string by max_header_bytes and
		// ends the connection on a longer one, before any request exists; or
		// the client, once it has the server's SETTINGS, refuses to send it.
	case err != nil:
		t.Fatal(err)
	default:
		resp.Body.Close() // the server closes the connection after a 431
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("8 KiB header: %d; want 431", resp.StatusCode)
		}
	}
	if be.arrived.Load() != 0 {
		t.Fatal("an oversized request reached the backend")
	}
}

func TestMaxConnsPerListener(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	p := startProxy(t, fmt.Sprintf(`
server: {max_conns: 2}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, be.addr()))
	addr := strings.TrimPrefix(p.URL, "http://")
	var held []net.Conn
	for range 2 { // two connections, each proven accepted by a full request
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
		buf := make([]byte, 12)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "HTTP/1.1 200" {
			t.Fatalf("held connection: %q %v", buf, err)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
	expectRefusedAtAccept(t, c, netlimit.MaxConns)
	waitFor(t, "the rejected connection to be counted", func() bool {
		return p.metric("levee_connections_rejected_total", map[string]string{"reason": netlimit.MaxConns}) == 1
	})
	held[0].Close()
	// A slot frees when a connection closes.
	waitFor(t, "a new connection to be served after one closed", func() bool {
		resp, err := http.DefaultClient.Do(&http.Request{Method: "GET", URL: mustURL(p.URL + "/"), Host: "a.test", Close: true})
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func TestUnknownHostIs404(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be.addr()))
	for _, host := range []string{"evil.example", "a.test.evil.example", be.addr(), ""} {
		resp := p.get(host, "/")
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusNotFound || len(body) > 100 {
			t.Fatalf("Host %q: %d %q; want a short 404", host, resp.StatusCode, body)
		}
	}
	if be.arrived.Load() != 0 {
		t.Fatal("a request for an unknown host reached a backend: levee must never be an open proxy")
	}
}

func TestUnreachableBackendIs502AndLogsAreBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens here now
	p := startProxy(t, fmt.Sprintf(`
log: {errors_per_second: 3}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, dead))
	const n = 50
	for range n {
		resp := p.get("a.test", "/")
		readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Levee-Error") != "backend-unreachable" {
			t.Fatalf("got %d %q; want 502 backend-unreachable", resp.StatusCode, resp.Header.Get("Levee-Error"))
		}
	}
	// However long the loop took, at most errors_per_second lines per
	// started second may appear: far fewer than one per failed request.
	lines := strings.Count(p.logs.String(), "backend unreachable")
	if lines < 1 || lines > 3*4 {
		t.Fatalf("%d log lines for %d failures; want between 1 and a few (rate-limited)", lines, n)
	}
}

func TestBackendTimeoutIs504(t *testing.T) {
	be := newGatedBackend(t) // never answers until the test ends
	p := startProxy(t, fmt.Sprintf(`
upstream: {response_header_timeout: 50ms}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, be.addr()))
	resp := p.get("a.test", "/")
	readAll(t, resp)
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Levee-Error") != "backend-timeout" {
		t.Fatalf("got %d %q; want 504 backend-timeout", resp.StatusCode, resp.Header.Get("Levee-Error"))
	}
	if a := p.app("a"); a.Limiter.InFlight() != 0 {
		t.Fatalf("slot not released after a timeout: inflight %d", a.Limiter.InFlight())
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestQueueOverloadedGauge: levee_queue_overloaded turns 1 once the
// shortest wait has stayed above the target for the interval (fake clock).
func TestQueueOverloadedGauge(t *testing.T) {
	be := newGatedBackend(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_wait: 1m, max_len: 10, target: 5ms, interval: 10ms}}
`, be.addr()), clk)
	overloaded := func() float64 { return p.metric("levee_queue_overloaded", map[string]string{"app": "a"}) }
	out := make(chan *http.Response, 5)
	p.asyncGet("a.test", "/", out)
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
	p.asyncGet("a.test", "/", out)
	waitFor(t, "one waiter", func() bool { return p.app("a").Limiter.Queued() == 1 })
	if got := overloaded(); got != 0 {
		t.Fatalf("levee_queue_overloaded = %v with a fresh queue, want 0", got)
	}
	// Arrivals sample the oldest wait: above the target from 6ms on, for
	// the interval by 17ms. The waiters older than the short wait (2 ×
	// target) are dropped then; the younger ones keep the queue overloaded.
	arrive := func(at time.Duration, queued int) {
		t.Helper()
		clk.Advance(at - clk.Now().Sub(time.Unix(1_800_000_000, 0)))
		p.asyncGet("a.test", "/", out)
		waitFor(t, fmt.Sprintf("%d waiters at %v", queued, at), func() bool { return p.app("a").Limiter.Queued() == queued })
	}
	arrive(6*time.Millisecond, 2)
	arrive(12*time.Millisecond, 3)
	if got := overloaded(); got != 0 {
		t.Fatalf("levee_queue_overloaded = %v before a whole interval above the target, want 0", got)
	}
	arrive(17*time.Millisecond, 2) // the two oldest dropped, one queued
	if got := overloaded(); got != 1 {
		t.Fatalf("levee_queue_overloaded = %v after the delay stayed above the target, want 1", got)
	}
	be.open()
}

// expectRefusedAtAccept reads what a connection refused at accept gets:
// levee's 503 for reason (unless the close's reset beat it), then the close,
// never a served request.
func expectRefusedAtAccept(t *testing.T, c net.Conn, reason string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("refused connection was neither answered nor closed (got %q)", got)
	}
	if len(got) > 0 && (!strings.HasPrefix(string(got), "HTTP/1.1 503 ") ||
		!strings.Contains(string(got), "\r\nLevee-Reject: "+reason+"\r\n") || !strings.Contains(string(got), "\r\nConnection: close\r\n")) {
		t.Fatalf("refused connection got %q; want a 503 with Levee-Reject: %s and Connection: close", got, reason)
	}
}

// TestRefusalReachesAClientStillSending: a request refused before levee has
// read all of it (here a header past max_header_bytes, still being sent)
// gets its answer, not a reset: levee closes such a connection lingering.
func TestRefusalReachesAClientStillSending(t *testing.T) {
	if testH2C() {
		t.Skip("HTTP/1.1 connections")
	}
	be := newGatedBackend(t)
	be.open()
	p := startProxy(t, fmt.Sprintf(`
server: {max_header_bytes: 4KiB}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, be.addr()))
	addr := strings.TrimPrefix(p.URL, "http://")
	for round := range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: ")
			chunk := []byte(strings.Repeat("y", 64<<10))
			for range 4 {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
		got, err := io.ReadAll(c)
		<-sent
		c.Close()
		if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 431 ") {
			t.Fatalf("round %d: read %.40q, %v; want a 431 and the end", round, got, err)
		}
	}
	if be.arrived.Load() != 0 {
		t.Fatal("an oversized request reached the backend")
	}
}
