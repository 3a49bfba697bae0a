package server

// Fault tests (issue 11, point 7): backends that misbehave below HTTP, as a
// real one does when it hangs, crashes or is not what levee was told it is,
// each a raw TCP listener scripted per connection, so the test decides
// exactly what is on the wire; and the shared state stalling: Redis here,
// the SQLite catalog in faults_linux_test.go. Timing is asserted only as
// "ended by the configured deadline plus a generous margin", never as a speed.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/redistest"
)

// faultMargin is what a deadline may be overshot by on a loaded 2-core
// machine under -race; it only catches a wait that the deadline did not end.
const faultMargin = 3 * time.Second

// rawBackend is a TCP backend whose first connection runs a fault script
// and whose later ones are healthy (serveOK), so the test sees what a fault
// leaves for the next request. It counts the connections, and closes and
// joins everything when the test ends.
type rawBackend struct {
	addr     string
	accepted atomic.Int64
	done     chan struct{} // closed when the test ends: scripts stop waiting

	mu    sync.Mutex
	conns []net.Conn
}

func newRawBackend(t *testing.T, fault func(c *scriptConn)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{addr: ln.Addr().String(), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				sc := &scriptConn{TCPConn: c.(*net.TCPConn), br: bufio.NewReader(c), b: b}
				if n == 1 {
					fault(sc)
				} else {
					sc.serveOK()
				}
			})
		}
	})
	t.Cleanup(func() {
		close(b.done)
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	return b
}

// scriptConn is one backend connection as its script sees it.
type scriptConn struct {
	*net.TCPConn
	br *bufio.Reader
	b  *rawBackend
}

// readRequest reads one request and its body; false when levee closed the
// connection (or the test ended) instead.
func (c *scriptConn) readRequest() bool {
	req, err := http.ReadRequest(c.br)
	if err != nil {
		return false
	}
	req.Body.Close() // reads the rest of the body
	return true
}

// serveOK answers every request on the connection with 200 "ok", as a
// healthy backend does, until levee closes it.
func (c *scriptConn) serveOK() {
	for c.readRequest() {
		if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")); err != nil {
			return
		}
	}
}

// stall neither reads nor writes until the test ends.
func (c *scriptConn) stall() { <-c.b.done }

// reset closes the connection with an RST (SO_LINGER 0), as a backend
// that crashes does: unsent bytes are dropped.
func (c *scriptConn) reset() {
	c.SetLinger(0)
	c.Close()
}

// hold waits until levee closes the connection or the test ends; it reads
// what comes and reports whether levee sent another request on it.
func (c *scriptConn) hold() (reused bool) {
	gone := make(chan bool, 1)
	go func() { gone <- c.readRequest() }()
	select {
	case reused = <-gone:
		return reused
	case <-c.b.done:
		c.Close()
		return <-gone
	}
}

// faultProxy is levee in front of be with one request at a time and no
// queue, so a slot a fault failed to give back refuses the next request.
func faultProxy(t *testing.T, be *rawBackend, timeout time.Duration) *proxy {
	t.Helper()
	return startProxy(t, photosApp(be.addr, "{concurrency: 1, queue: {max_len: 0}}",
		fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
}

// nextServed checks what a fault leaves behind: the app's slot given back,
// and the next request served, on a fresh backend connection when fresh.
func nextServed(t *testing.T, p *proxy, be *rawBackend, fresh bool) {
	t.Helper()
	waitFor(t, "the app's slot given back", func() bool { return p.app("photos").Limiter.InFlight() == 0 })
	dialed := be.accepted.Load()
	resp := p.get("photos.test", "/next")
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("the request after the fault: %d %q (%s); want 200 ok", resp.StatusCode, body, resp.Header.Get("Levee-Reject"))
	}
	if got := be.accepted.Load() - dialed; fresh && got != 1 {
		t.Errorf("the request after the fault opened %d backend connections, want 1 (the faulty one dropped)", got)
	}
}

// A backend that accepts and then neither reads nor answers: 504
// backend-timeout once upstream.response_header_timeout has passed, and the
// slot is given back. (TestBackendTimeoutIs504 is the backend that reads
// the request and never answers.)
func TestFaultBackendHangsAfterAccept(t *testing.T) {
	leaktest.Check(t)
	const timeout = 300 * time.Millisecond
	be := newRawBackend(t, (*scriptConn).stall)
	p := faultProxy(t, be, timeout)
	start := time.Now()
	resp := p.get("photos.test", "/")
	readAll(t, resp)
	took := time.Since(start)
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Levee-Error") != "backend-timeout" {
		t.Fatalf("got %d %q; want 504 backend-timeout", resp.StatusCode, resp.Header.Get("Levee-Error"))
	}
	if took < timeout || took > timeout+faultMargin {
		t.Errorf("answered after %v; want the %v deadline (+ at most %v)", took, timeout, faultMargin)
	}
	nextServed(t, p, be, true)
}

// A backend that sends part of a response and then resets the connection:
// the client never gets a response that looks complete (it gets none, or
// its body breaks off), the slot is given back, and the next request goes
// out on a fresh connection.
func TestFaultBackendResetsMidResponse(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		// streamed: the first bytes reach the client before the reset, so
		// the backend waits for the client to have them. A body of known
		// length may be held by levee until more comes: that backend
		// resets at once.
		streamed bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nhello", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			cut := make(chan struct{})
			be := newRawBackend(t, func(c *scriptConn) {
				c.readRequest()
				c.Write([]byte(tc.head))
				if tc.streamed {
					select {
					case <-cut:
					case <-c.b.done:
					}
				}
				c.reset()
			})
			p := faultProxy(t, be, time.Minute)
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
			req.Host = "photos.test"
			resp, err := http.DefaultClient.Do(req)
			switch {
			case err != nil: // no response: the connection or stream was closed
				if tc.streamed {
					t.Fatalf("a streamed response's head did not arrive before the reset: %v", err)
				}
			case resp.StatusCode == http.StatusBadGateway && resp.Header.Get("Levee-Error") != "":
				readAll(t, resp) // levee's own answer: the reset came before the head
			default:
				if tc.streamed {
					first := make([]byte, len("hello"))
					if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "hello" {
						t.Fatalf("first bytes %q (%v) before the reset", first, err)
					}
				}
				close(cut)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("%d with a body of %d bytes ending cleanly after the backend reset; want it broken off", resp.StatusCode, len(body))
				}
			}
			nextServed(t, p, be, true)
		})
	}
}

// A backend that answers what is not HTTP: 502 backend-unreachable, and
// levee closes the connection instead of sending another request on it.
// Bytes that never end a header cannot be told from a slow header: they
// are waited for until upstream.response_header_timeout (504).
func TestFaultBackendAnswersGarbage(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name, answer string
		code         int
		reason       string
	}{
		{"not-http", "SSH-2.0-OpenSSH_9.6\r\n\r\n", http.StatusBadGateway, "backend-unreachable"},
		{"malformed-status-line", "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok", http.StatusBadGateway, "backend-unreachable"},
		{"bad-content-length", "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok", http.StatusBadGateway, "backend-unreachable"},
		{"conflicting-content-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", http.StatusBadGateway, "backend-unreachable"},
		{"no-header-end", "\x00\x01\x02 not http", http.StatusGatewayTimeout, "backend-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			reused := make(chan bool, 1)
			be := newRawBackend(t, func(c *scriptConn) {
				c.readRequest()
				c.Write([]byte(tc.answer))
				reused <- c.hold()
			})
			p := faultProxy(t, be, timeout)
			resp := p.get("photos.test", "/")
			readAll(t, resp)
			if resp.StatusCode != tc.code || resp.Header.Get("Levee-Error") != tc.reason {
				t.Fatalf("got %d %q; want %d %s", resp.StatusCode, resp.Header.Get("Levee-Error"), tc.code, tc.reason)
			}
			if recv(t, reused, "levee closing the connection that answered garbage") {
				t.Fatal("levee sent another request on the connection that answered garbage")
			}
			nextServed(t, p, be, true)
		})
	}
}

// A backend that trickles its body, a byte at a time with gaps shorter than
// upstream.response_header_timeout, for longer than it in all: the bytes
// pass while they come (the timeout bounds each read, not the body), and a
// stall longer than the timeout breaks the response off within it.
func TestFaultBackendTrickles(t *testing.T) {
	const (
		timeout = 400 * time.Millisecond
		gap     = timeout / 4
		n       = 8 // bytes: 2 × timeout in all
	)
	trickle := func(c *scriptConn, ack <-chan struct{}, framed func(i int) string) bool {
		for i := range n {
			if _, err := io.WriteString(c, framed(i)); err != nil {
				return false
			}
			if ack != nil {
				select {
				case <-ack:
				case <-c.b.done:
					return false
				}
			}
			time.Sleep(gap) // the trickle itself, not an ordering
		}
		return true
	}

	t.Run("chunked-then-stall", func(t *testing.T) {
		leaktest.Check(t)
		ack := make(chan struct{})
		be := newRawBackend(t, func(c *scriptConn) {
			c.readRequest()
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
			if trickle(c, ack, func(i int) string { return fmt.Sprintf("1\r\n%c\r\n", 'a'+i) }) {
				c.hold() // stalls: no last chunk
			}
		})
		p := faultProxy(t, be, timeout)
		resp := p.get("photos.test", "/")
		defer resp.Body.Close()
		b := make([]byte, 1)
		for i := range n {
			// The backend sends the next byte only once this one is here:
			// a levee that held the stream would deadlock (recv's guard).
			if _, err := io.ReadFull(resp.Body, b); err != nil || b[0] != byte('a'+i) {
				t.Fatalf("byte %d: %q (%v)", i, b, err)
			}
			ack <- struct{}{}
		}
		last := time.Now()
		rest, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("the stalled stream ended cleanly with %q, as if complete; want it broken off", rest)
		}
		if took := time.Since(last); took > timeout+gap+faultMargin {
			t.Errorf("the stall ended the stream %v after the last byte; want within the %v timeout (+ a margin)", took, timeout)
		}
		nextServed(t, p, be, true)
	})

	t.Run("content-length-whole", func(t *testing.T) {
		leaktest.Check(t)
		be := newRawBackend(t, func(c *scriptConn) {
			c.readRequest()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", n)
			if trickle(c, nil, func(i int) string { return string(rune('a' + i)) }) {
				c.serveOK() // the connection is good for more
			}
		})
		p := faultProxy(t, be, timeout)
		start := time.Now()
		resp := p.get("photos.test", "/")
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "abcdefgh" {
			t.Fatalf("got %d %q; want the whole trickled body", resp.StatusCode, body)
		}
		if took := time.Since(start); took < timeout {
			t.Fatalf("the body took %v, less than the %v timeout: the test proves nothing", took, timeout)
		}
		nextServed(t, p, be, false)
	})
}

// offer sends n requests to p at one instant of the fake clock and counts
// those admitted; each must be answered 200 or 429 within bound. It also
// returns the slowest answer's time.
func offer(t *testing.T, p *proxy, n int, bound time.Duration) (admitted int, slowest time.Duration) {
	t.Helper()
	for range n {
		start := time.Now()
		code := p.getAs("").StatusCode
		took := time.Since(start)
		slowest = max(slowest, took)
		if took > bound {
			t.Errorf("a request took %v; want at most %v", took, bound)
		}
		switch code {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d; want 200 or 429", code)
		}
	}
	return admitted, slowest
}

// untilFake polls cond, moving the fake clock a second on between polls
// (heartbeats run on it), for at most guard.
func untilFake(t *testing.T, clk *clock.Fake, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		clk.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
}

// Redis frozen (SIGSTOP: its socket accepts, nothing answers) under two
// servers sharing a limit: serving goes on, no request waits past
// cluster.redis.timeout (+ a margin), and the limit holds as
// docs/cluster.md promises: each server spends the units it holds, then its
// fair share (rate and burst ÷ 2), never unlimited. Once Redis goes on, the
// limit is cluster-wide again: one server may take more than its share.
// (TestClusterLimitIsSharedAcrossServers is Redis killed: calls fail at once.)
func TestFaultRedisStalls(t *testing.T) {
	leaktest.Check(t)
	const (
		timeout = 300 * time.Millisecond
		burst   = 20
		lease   = 5 // 50ms of 100/s
	)
	r := redistest.Start(t)
	ps, clk := clusterProxiesTimeout(t, r, 2, fmt.Sprintf("{rate: 100/s, burst: %d}", burst), timeout)
	untilFake(t, clk, "both servers counting two live", func() bool {
		return ps[0].srv.apps.Cluster().Live() == 2 && ps[1].srv.apps.Cluster().Live() == 2
	})
	for _, p := range ps {
		if n, _ := offer(t, p, 2, guard); n != 2 {
			t.Fatal("refused with Redis up and the bucket full")
		}
	}

	r.Pause()
	clk.Advance(time.Second) // a full bucket; heartbeats find Redis stalled
	bound := timeout + faultMargin
	stalled, slowest := offer(t, ps[0], 3*burst, bound)
	offer(t, ps[1], 2, bound)
	for i, p := range ps {
		if got := p.metric("levee_cluster_degraded", nil); got != 1 {
			t.Errorf("server %d: levee_cluster_degraded = %v with Redis stalled; want 1", i, got)
		}
	}
	if stalled > lease+burst/2 || stalled == 0 {
		t.Errorf("one server admitted %d of %d with Redis stalled; want some, and at most its held lease and its share, %d",
			stalled, 3*burst, lease+burst/2)
	}
	// A second round, a probe gap later: one request probes Redis and waits
	// out the deadline again; the share still holds.
	clk.Advance(time.Second)
	again, slowest2 := offer(t, ps[0], 3*burst, bound)
	if again > burst/2 || again == 0 {
		t.Errorf("a second later, one server admitted %d with Redis stalled; want some, and at most its share, %d", again, burst/2)
	}
	t.Logf("Redis stalled: admitted %d of %d (slowest answer %v), a second later %d (slowest %v)",
		stalled, 3*burst, slowest.Round(time.Millisecond), again, slowest2.Round(time.Millisecond))

	r.Resume()
	untilFake(t, clk, "both servers back to the shared limit", func() bool {
		return ps[0].metric("levee_cluster_degraded", nil) == 0 && ps[1].metric("levee_cluster_degraded", nil) == 0
	})
	clk.Advance(time.Second)
	shared, _ := offer(t, ps[0], 3*burst, guard)
	if shared <= burst/2 || shared > burst {
		t.Errorf("after Redis went on, one server admitted %d of %d at one instant; want more than its share %d (the limit is shared again) and at most the burst %d",
			shared, 3*burst, burst/2, burst)
	}
	t.Logf("Redis back: admitted %d of %d", shared, 3*burst)
}

// Redis killed (SIGKILL by PID) under a running load on two servers
// sharing a limit, then started again, empty: every request is answered,
// 200 or 429, within cluster.redis.timeout (+ a margin), before, during
// and after; while Redis is gone both servers say they are degraded and go
// on admitting (their fair share, docs/cluster.md); once it is back they
// share the limit again.
func TestFaultRedisKilledUnderLoad(t *testing.T) {
	leaktest.Check(t)
	const timeout = 300 * time.Millisecond
	r := redistest.Start(t)
	ps, clk := clusterProxiesTimeout(t, r, 2, "{rate: 100/s, burst: 20}", timeout)
	untilFake(t, clk, "both servers counting two live", func() bool {
		return ps[0].srv.apps.Cluster().Live() == 2 && ps[1].srv.apps.Cluster().Live() == 2
	})

	// counts are the answers of a phase: [0] 200, [1] 429.
	type counts [2]atomic.Int64
	var phases [3]counts
	var phase atomic.Int32
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range 8 {
		p := ps[c%2]
		wg.Go(func() {
			for !stop.Load() {
				req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
				req.Host = "a.test"
				ph := phase.Load()
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("phase %d: no answer: %v", ph, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if took := time.Since(start); took > timeout+faultMargin {
					t.Errorf("phase %d: answered after %v; want within cluster.redis.timeout %v (+ at most %v)", ph, took, timeout, faultMargin)
				}
				switch resp.StatusCode {
				case http.StatusOK:
					phases[ph][0].Add(1)
				case http.StatusTooManyRequests:
					phases[ph][1].Add(1)
				default:
					t.Errorf("phase %d: status %d; want 200 or 429", ph, resp.StatusCode)
					return
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// run waits for n answers in phase ph, moving the fake clock 50 ms on
	// between polls (the limit refills, heartbeats run).
	run := func(ph int32, n int64) {
		t.Helper()
		phase.Store(ph)
		deadline := time.Now().Add(guard)
		for phases[ph][0].Load()+phases[ph][1].Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("phase %d: %d answers within %v; want %d", ph, phases[ph][0].Load()+phases[ph][1].Load(), guard, n)
			}
			clk.Advance(50 * time.Millisecond)
			time.Sleep(5 * time.Millisecond)
		}
	}
	run(0, 200)

	r.Stop()
	run(1, 300)
	for i, p := range ps {
		if got := p.metric("levee_cluster_degraded", nil); got != 1 {
			t.Errorf("server %d: levee_cluster_degraded = %v with Redis killed; want 1", i, got)
		}
	}

	r.Restart()
	untilFake(t, clk, "both servers back to the shared limit", func() bool {
		return ps[0].metric("levee_cluster_degraded", nil) == 0 && ps[1].metric("levee_cluster_degraded", nil) == 0
	})
	phase.Store(2)
	for i := range phases[2] {
		phases[2][i].Store(0) // answers from before the servers were back
	}
	run(2, 200)
	stop.Store(true)
	wg.Wait()
	for ph, name := range []string{"Redis up", "Redis killed", "Redis restarted"} {
		ok, limited := phases[ph][0].Load(), phases[ph][1].Load()
		if ok == 0 {
			t.Errorf("%s: nothing admitted of %d; want serving to go on", name, ok+limited)
		}
		t.Logf("%s: %d answered 200, %d 429", name, ok, limited)
	}
}
