package server

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/testnet"
)

// These tests are of the fasthttp engine, which serves HTTP/1.1: their
// clients write raw HTTP/1.1 (in the h2c run too, the listener hands such
// connections to fasthttp). net/http notices a client that leaves by itself.

// dialRequest opens a connection to addr and sends raw on it; the
// connection is closed when the test ends.
func dialRequest(t *testing.T, addr, raw string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

// watchers counts the goroutines watching waiting fasthttp requests'
// clients: a server's peerWatch loop, which runs while one is listed.
func watchers() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("netlimit.(*PeerWatch).loop("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// noWatchers waits for every watch loop to be gone: none outlives the
// requests it watches.
func noWatchers(t *testing.T) {
	t.Helper()
	waitFor(t, "no goroutine watching a client", func() bool { return watchers() == 0 })
}

const queuedGet = "GET /queued HTTP/1.1\r\nHost: a.test\r\n\r\n"

// TestFastClientThatLeavesGivesUpItsQueuePlace: a request queued behind the
// only slot whose client closes (or resets) its connection leaves the queue
// long before queue.max_wait, is counted as 499, gets no answer and never
// reaches the backend; the request queued behind it stays.
func TestFastClientThatLeavesGivesUpItsQueuePlace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(c *net.TCPConn)
	}{
		{"close", func(c *net.TCPConn) { c.Close() }},
		{"reset", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }},
		// A half-close (FIN) counts as leaving, as on net/http and nginx.
		{"close write", func(c *net.TCPConn) { c.CloseWrite() }},
		// Bytes behind the request hide the FIN from a peek; the TCP state shows it.
		{"pipelined then close", func(c *net.TCPConn) {
			io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a.test\r\n\r\n")
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newGatedBackend(t)
			p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_len: 4, max_wait: 1m, target: 1m}}
`, be.addr()))
			addr := strings.TrimPrefix(p.URL, "http://")
			queued := func() float64 { return p.metric("levee_queue_length", map[string]string{"app": "a"}) }
			first := make(chan *http.Response, 1)
			p.asyncGet("a.test", "/", first)
			waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
			leaver := dialRequest(t, addr, queuedGet)
			waitFor(t, "the leaver to queue", func() bool { return queued() == 1 })
			stayer := dialRequest(t, addr, "GET /stays HTTP/1.1\r\nHost: a.test\r\n\r\n")
			waitFor(t, "a second request to queue behind it", func() bool { return queued() == 2 })
			// Both watched, by one goroutine: a queue costs none per request.
			waitFor(t, "both watched", func() bool { return p.srv.peers.Watched() == 2 })
			if n := watchers(); n != 1 {
				t.Fatalf("%d goroutines watch the two waiting requests; want 1", n)
			}

			tc.leave(leaver)
			// Within the 10 s of waitFor, far within max_wait (1m).
			waitFor(t, "the leaver to give up its place", func() bool { return queued() == 1 })
			waitFor(t, "a 499 to be counted", func() bool {
				return p.metric("levee_requests_total", map[string]string{"app": "a", "code": "499"}) == 1
			})
			if tc.name == "close write" { // the client still reads: levee sent nothing and closed
				leaver.SetReadDeadline(time.Now().Add(10 * time.Second))
				if b, err := io.ReadAll(leaver); len(b) != 0 || err != nil {
					t.Errorf("the client that left read %q, %v; want nothing, then the close", b, err)
				}
			}

			be.open()
			if r := <-first; r.StatusCode != http.StatusOK {
				t.Fatalf("first request: %d", r.StatusCode)
			}
			stayer.SetReadDeadline(time.Now().Add(10 * time.Second))
			line := make([]byte, len("HTTP/1.1 200"))
			if _, err := io.ReadFull(stayer, line); err != nil || string(line) != "HTTP/1.1 200" {
				t.Fatalf("the request queued behind: %q %v; want 200", line, err)
			}
			if got := be.arrived.Load(); got != 2 {
				t.Fatalf("the backend saw %d requests; want 2 (not the one whose client left)", got)
			}
			if got := p.metric("levee_requests_total", map[string]string{"app": "a", "code": "499"}); got != 1 {
				t.Fatalf("levee_requests_total{code=499} = %v; want 1", got)
			}
			noWatchers(t)
		})
	}
}

// TestFastQueuedRequestLeavesAtShutdown: a watched request still ends when
// the server shuts down, answered 503 draining and closed (so that its
// client retries elsewhere), while the drain waits for the one at the
// backend; so does one that comes once the drain has begun and would wait.
func TestFastQueuedRequestLeavesAtShutdown(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_len: 4, max_wait: 1m, target: 1m}}
`, be.addr()))
	first := make(chan *http.Response, 1)
	p.asyncGet("a.test", "/", first)
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
	c := dialRequest(t, strings.TrimPrefix(p.URL, "http://"), queuedGet)
	queued := func() float64 { return p.metric("levee_queue_length", map[string]string{"app": "a"}) }
	waitFor(t, "the request to queue, watched", func() bool { return queued() == 1 && watchers() == 1 })
	// A connection accepted before the drain whose first request comes
	// after it began (an upgrade's old levee accepted it just before it
	// handed over): no client sends a connection's first request again.
	// (Over h2c the listener's sorter holds it until its first bytes.)
	ln := p.srv.listeners[0].ln
	open := ln.Open()
	late := dialRequest(t, strings.TrimPrefix(p.URL, "http://"), "")
	waitFor(t, "the late connection accepted", func() bool { return ln.Open() > open })
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop() }()
	waitFor(t, "the queued request to leave at shutdown", func() bool { return queued() == 0 })
	answeredDraining := func(what string, c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if b, err := io.ReadAll(c); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 503") ||
			!strings.Contains(string(b), "Levee-Reject: draining") || !strings.Contains(string(b), "Connection: close") {
			t.Errorf("%s read %q, %v; want 503 draining, then the close", what, b, err)
		}
	}
	answeredDraining("the queued request's client", c)
	if _, err := io.WriteString(late, queuedGet); err != nil {
		t.Fatal(err)
	}
	answeredDraining("the request that came once the drain had begun", late)
	noWatchers(t)
	be.open()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	<-first
	if got := be.arrived.Load(); got != 1 {
		t.Fatalf("the backend saw %d requests; want 1", got)
	}
}

// TestFastClientThatLeavesGivesUpItsPoolWait: the same for a request
// waiting for a backend_limits.inflight slot.
func TestFastClientThatLeavesGivesUpItsPoolWait(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits:
      concurrency: 4
      queue: {max_wait: 1m, max_len: 4, target: 1m}
      client: {key: header:X-Api-Key}
    backend_limits: {inflight: 1}
`, be.addr()))
	held := make(chan *http.Response, 1)
	p.asyncGetAs("holder", held)
	waitFor(t, "the pool's only slot to be held", func() bool { return be.inflight.Load() == 1 })
	c := dialRequest(t, strings.TrimPrefix(p.URL, "http://"), "GET / HTTP/1.1\r\nHost: a.test\r\nX-Api-Key: leaver\r\n\r\n")
	queued := func() float64 { return p.metric("levee_pool_queue_length", map[string]string{"app": "a"}) }
	waitFor(t, "the leaver to wait for the pool", func() bool { return queued() == 1 })
	c.Close()
	waitFor(t, "the leaver to give up its wait", func() bool { return queued() == 0 })
	waitFor(t, "a 499 to be counted", func() bool {
		return p.metric("levee_requests_total", map[string]string{"app": "a", "code": "499"}) == 1
	})
	if got := p.app("a").Limiter.InFlight(); got != 1 {
		t.Fatalf("app slots held: %d; want 1 (the leaver gave its back)", got)
	}
	be.open()
	if r := <-held; r.StatusCode != http.StatusOK {
		t.Fatalf("held request: %d", r.StatusCode)
	}
	if got := be.arrived.Load(); got != 1 {
		t.Fatalf("the backend saw %d requests; want 1", got)
	}
	noWatchers(t)
}

// TestFastClientThatLeavesWhileItsHostLoads: a request waiting for its host
// to load from the catalog, whether it started the load or joined it,
// leaves when its client does, with a 499 (as on net/http); the load goes on.
func TestFastClientThatLeavesWhileItsHostLoads(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	_, st := catalogFile(t, storedApp("cold", "cold.test", be.addr(), ""))
	g := &gatedStore{Store: st, gate: make(chan struct{}), started: make(chan string, 4)}
	p := startCatalogProxy(t, "catalog: {sqlite: unused-in-test.db, loader: {concurrency: 1, max_waiters: 4, timeout: 1m}}\n", g)
	addr := strings.TrimPrefix(p.URL, "http://")
	get := "GET / HTTP/1.1\r\nHost: cold.test\r\n\r\n"
	starter := dialRequest(t, addr, get)
	<-g.started // the load is held
	joiner := dialRequest(t, addr, get)
	waitFor(t, "a second request to join the load", func() bool { return p.srv.lazy.Stats().Waiters == 1 })
	unrouted499 := func() float64 {
		return p.metric("levee_requests_total", map[string]string{"app": "", "code": "499"})
	}
	joiner.Close()
	waitFor(t, "the joiner to leave", func() bool { return p.srv.lazy.Stats().Waiters == 0 })
	starter.Close()
	waitFor(t, "two 499s to be counted", func() bool { return unrouted499() == 2 })
	close(g.gate)
	if body := readAll(t, p.get("cold.test", "/")); body != "ok" {
		t.Fatalf("cold.test after the load: %q; want ok", body)
	}
	if got := be.arrived.Load(); got != 1 {
		t.Fatalf("the backend saw %d requests; want 1 (not the two whose clients left)", got)
	}
	noWatchers(t)
}

// TestFastTLSClientThatLeavesGivesUpItsQueuePlace: over TLS, a client's
// close sends close_notify before its FIN; levee still sees it leave.
func TestFastTLSClientThatLeavesGivesUpItsQueuePlace(t *testing.T) {
	be := newGatedBackend(t)
	cert, key, roots := selfSigned(t)
	p := startProxy(t, fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_len: 4, max_wait: 1m, target: 1m}}
`, cert, key, be.addr()))
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", p.srv.Addrs()[0].String(), &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, queuedGet); err != nil {
			t.Fatal(err)
		}
		return c
	}
	queued := func() float64 { return p.metric("levee_queue_length", map[string]string{"app": "a"}) }
	holder := dial()
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
	leaver := dial()
	waitFor(t, "the leaver to queue", func() bool { return queued() == 1 })
	leaver.Close()
	waitFor(t, "the leaver to give up its place", func() bool { return queued() == 0 })
	waitFor(t, "a 499 to be counted", func() bool {
		return p.metric("levee_requests_total", map[string]string{"app": "a", "code": "499"}) == 1
	})
	be.open()
	holder.SetReadDeadline(time.Now().Add(10 * time.Second))
	line := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(holder, line); err != nil || string(line) != "HTTP/1.1 200" {
		t.Fatalf("first request: %q %v; want 200", line, err)
	}
	if got := be.arrived.Load(); got != 1 {
		t.Fatalf("the backend saw %d requests; want 1", got)
	}
	noWatchers(t)
}

// fastCtxOn is a RequestCtx for host on the server end of a TCP pair,
// wrapped as levee's listener wraps it.
func fastCtxOn(t *testing.T, host string) (*fasthttp.RequestCtx, *net.TCPConn) {
	t.Helper()
	client, server := testnet.TCPPair(t)
	var ctx fasthttp.RequestCtx
	ctx.Init2(netlimit.Wrap(server), nil, false)
	fastRequest(&ctx, host)
	return &ctx, client
}

// TestFastAdmissionWithoutWaitingWatchesNothing: a request that gets its
// slot at once calls no Done on its context (so no goroutine, timer or
// syscall), with the app's limits and with backend_limits. Its
// allocations: TestFastAdmissionWithoutWaitingAllocatesNothing.
func TestFastAdmissionWithoutWaitingWatchesNothing(t *testing.T) {
	for _, tc := range []struct{ name, limits string }{
		{"limits", "limits: {concurrency: 2, queue: {max_len: 4, max_wait: 1m}}"},
		{"backend_limits", "limits: {concurrency: 2, queue: {max_len: 4, max_wait: 1m}}\n    backend_limits: {inflight: 2}"},
	} {
		t.Run(tc.name, func(t *testing.T) { admitAtOnce(t, tc.limits) })
	}
}

// admitAtOnce admits requests to an app with limits (YAML) that get their
// slot at once, fails t if one was refused or had its client watched, and
// returns the allocations per admission.
func admitAtOnce(t *testing.T, limits string) float64 {
	t.Helper()
	s := New(mustParse(t, "apps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n    "+limits+"\n"), Options{})
	rt, ok := s.current.Load().catalog.Lookup("a.test", "/")
	if !ok {
		t.Fatal("no route")
	}
	ctx, _ := fastCtxOn(t, "a.test")
	e := &fastExchange{c: ctx}
	e.pc.Bind(ctx, &s.peers)
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		slot, _, ok := s.enter(e.ctx(), rt, "/", "", now, nil, nil)
		if !ok {
			t.Fatal("refused with a free slot")
		}
		slot.Release()
	})
	if s.peers.Watched() != 0 || watchers() != 0 {
		t.Fatal("a request that did not wait had its client watched")
	}
	e.pc.Finish()
	return allocs
}

// TestFastWatcherRunsOnlyWhileTheRequestWaits: the request is watched from
// when it queues until it is admitted, not while the backend holds it; the
// watch's goroutine runs only while a request is watched.
func TestFastWatcherRunsOnlyWhileTheRequestWaits(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_len: 4, max_wait: 1m, target: 1m}}
`, be.addr()))
	a := p.app("a")
	if err := a.Limiter.Acquire(t.Context()); err != nil { // the only slot
		t.Fatal(err)
	}
	ctx, _ := fastCtxOn(t, "a.test")
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.srv.serveFast(ctx)
	}()
	waitFor(t, "the request to queue, watched", func() bool {
		return a.Limiter.Queued() == 1 && p.srv.peers.Watched() == 1 && watchers() == 1
	})
	a.Limiter.Release()
	waitFor(t, "the request at the backend", func() bool { return be.inflight.Load() == 1 })
	if n := p.srv.peers.Watched(); n != 0 {
		t.Fatalf("%d requests watched while the only one is at the backend; want 0", n)
	}
	noWatchers(t) // the loop ends with nothing to watch
	be.open()
	<-done
	if code := ctx.Response.StatusCode(); code != http.StatusOK {
		t.Fatalf("status %d; want 200", code)
	}
}

// refusingWriter is an HTTP/2 ResponseWriter that records RefuseStream.
type refusingWriter struct {
	*httptest.ResponseRecorder
	refused bool
}

func (w *refusingWriter) RefuseStream() bool { w.refused = true; return true }

// TestH2DrainingRefusesTheStream: over HTTP/2, a request the drain ended
// before admission (drainingRefusal, draining.go) has its stream refused
// (REFUSED_STREAM: not processed), which an HTTP/2 client sends again by
// itself to the levee that serves now, rather than a 503 it would hand to
// its caller; any other refusal is answered.
func TestH2DrainingRefusesTheStream(t *testing.T) {
	for _, tc := range []struct {
		ref    limits.Refusal
		refuse bool
	}{
		{drainingRefusal, true},
		{limits.Refusal{Code: http.StatusTooManyRequests, Reason: reply.Rate}, false},
	} {
		w := &refusingWriter{ResponseRecorder: httptest.NewRecorder()}
		e := new(httpExchange)
		e.R = httptest.NewRequest("GET", "http://a.test/", nil)
		e.rec.ResponseWriter = w
		e.refuse(tc.ref)
		if w.refused != tc.refuse || tc.refuse == (w.Code == tc.ref.Code && w.Body.Len() > 0) {
			t.Errorf("%s: stream refused %v, answered %d %q; want refused %v", tc.ref.Reason, w.refused, w.Code, w.Body, tc.refuse)
		}
	}
}

// TestUnanswered: a request whose admission ended without a refusal is
// answered by the drain's rules (draining.go), and one a sealed limiter
// turned away (limits.Sealed: this levee handed over) as one that came
// once the drain had begun, whether or not the drain has begun yet: a
// reused connection is closed unanswered (its client sends the request
// again, to the levee that serves now), a first request is answered 503.
func TestUnanswered(t *testing.T) {
	rate := limits.Refusal{Code: http.StatusTooManyRequests, Reason: reply.Rate}
	for _, tc := range []struct {
		name                  string
		ref                   limits.Refusal
		draining, live, reuse bool
		want                  limits.Refusal
	}{
		{"a refusal", rate, true, true, true, rate},
		{"client left", limits.Refusal{}, false, true, true, limits.Refusal{}},
		{"wait ended by the drain", limits.Refusal{}, true, true, true, drainingRefusal},
		{"reused, came in the drain", limits.Refusal{}, true, false, true, limits.Refusal{}},
		{"first request, came in the drain", limits.Refusal{}, true, false, false, drainingRefusal},
		{"sealed, reused", limits.Sealed, false, true, true, limits.Refusal{}},
		{"sealed, reused, draining", limits.Sealed, true, true, true, limits.Refusal{}},
		{"sealed, first request", limits.Sealed, false, true, false, drainingRefusal},
	} {
		s := new(Server)
		s.draining.Store(tc.draining)
		if got := s.unanswered(tc.ref, tc.live, tc.reuse); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
