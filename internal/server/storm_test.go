package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// stormBackend answers every request with "ok" once release is closed, and
// counts, from its side of the socket, the connections opened to it in total
// and the most open at once.
type stormBackend struct {
	*httptest.Server
	release  chan struct{}
	inflight atomic.Int64
	opened   atomic.Int64 // connections accepted, ever
	open     atomic.Int64 // connections not yet closed
	peak     atomic.Int64 // most connections open at once
	port     int
}

func newStormBackend(t *testing.T, release chan struct{}) *stormBackend {
	b := &stormBackend{release: release}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.inflight.Add(1)
		defer b.inflight.Add(-1)
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	}))
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.opened.Add(1)
			n := b.open.Add(1)
			for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			b.open.Add(-1)
		}
	}
	b.Start()
	t.Cleanup(b.Close)
	b.port = b.Listener.Addr().(*net.TCPAddr).Port
	return b
}

func (b *stormBackend) addr() string { return b.Listener.Addr().String() }

// tcpSocket is one line of /proc/net/tcp or tcp6: its endpoints (as the
// kernel prints them, hex) and its state.
type tcpSocket struct{ local, remote, state string }

// procTCPSockets reads every IPv4 and IPv6 TCP socket of this network
// namespace, TIME_WAIT ones included (state 06).
func procTCPSockets(t *testing.T) []tcpSocket {
	t.Helper()
	var out []tcpSocket
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			if f == "/proc/net/tcp" {
				t.Skipf("cannot read %s (%v): the TIME_WAIT check needs Linux procfs", f, err)
			}
			continue // IPv6 may be off
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st ...
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 {
				continue
			}
			out = append(out, tcpSocket{local: fs[1], remote: fs[2], state: fs[3]})
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
	}
	return out
}

// hexPort is the port of a /proc/net/tcp address such as 0100007F:1F90.
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(p)
}

const tcpTimeWait = "06"

// timeWaitTowards counts the TIME_WAIT sockets whose remote port is one of
// ports, i.e. the connecting side's sockets toward those listeners (levee's,
// toward its backends), leaving out those already in before.
func timeWaitTowards(t *testing.T, ports map[int]bool, before map[tcpSocket]bool) int {
	t.Helper()
	n := 0
	for _, s := range procTCPSockets(t) {
		if s.state == tcpTimeWait && ports[hexPort(s.remote)] && !before[s] {
			n++
		}
	}
	return n
}

// raiseFDLimit makes sure this process may hold need descriptors, raising
// the soft limit up to the hard one; false when even the hard one is lower.
func raiseFDLimit(t *testing.T, need uint64) bool {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= need {
		return true
	}
	if lim.Max < need {
		return false
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit NOFILE to %d: %v", need, err)
	}
	return true
}

// Issue 4, point 5: a storm of 5,000 concurrent requests to one app opens at
// most upstream.max_conns_per_backend connections to each backend, in total
// and not only at once: the idle pool hands each connection on to the next
// request instead of closing it and dialling anew, so levee's TIME_WAIT
// sockets toward its backends are bounded by the pool, not by the requests.
func TestUpstreamStormStaysBounded(t *testing.T) {
	const (
		n         = 5000 // concurrent client requests
		perBE     = 16   // upstream.max_conns_per_backend (and max_idle_per_backend)
		nBackends = 2
	)
	// One process holds both ends of every client connection (2n), levee's
	// upstream connections and the backends' ends of them, and the listeners.
	if !raiseFDLimit(t, 2*n+4*nBackends*perBE+512) {
		t.Skipf("the hard RLIMIT_NOFILE is below the %d descriptors %d concurrent loopback requests need", 2*n+512, n)
	}
	start := time.Now()

	release := make(chan struct{})
	var releaseOnce sync.Once
	openGate := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(openGate) // before the backends close: nothing stays held
	bes := make([]*stormBackend, nBackends)
	ports := map[int]bool{}
	addrs := make([]string, nBackends)
	for i := range bes {
		bes[i] = newStormBackend(t, release)
		ports[bes[i].port] = true
		addrs[i] = bes[i].addr()
	}
	// TIME_WAIT sockets toward these ports before the storm belong to someone
	// else (a port the kernel gave out again); only new ones count.
	before := map[tcpSocket]bool{}
	for _, s := range procTCPSockets(t) {
		if s.state == tcpTimeWait {
			before[s] = true
		}
	}

	p := startProxy(t, fmt.Sprintf(`
server: {max_conns: 20000}
upstream: {max_conns_per_backend: %d, max_idle_per_backend: %d}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 5000, queue: {max_len: 5000, max_wait: 30s, target: 1m}}
`, perBE, perBE, strings.Join(addrs, ", ")))

	client := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 15 * time.Second}).DialContext,
		MaxConnsPerHost:     0, // one connection per concurrent request
		MaxIdleConnsPerHost: n,
		DisableCompression:  true,
	}
	t.Cleanup(client.CloseIdleConnections)
	hc := &http.Client{Transport: client, Timeout: 60 * time.Second} // only catches a hang

	var ok, failed atomic.Int64
	var firstErr sync.Once
	var errMsg atomic.Value
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
			req.Host = "a.test"
			resp, err := hc.Do(req)
			if err != nil {
				failed.Add(1)
				firstErr.Do(func() { errMsg.Store(err.Error()) })
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
				failed.Add(1)
				firstErr.Do(func() {
					errMsg.Store(fmt.Sprintf("status %d %s body %q err %v", resp.StatusCode, resp.Header.Get("Levee-Reject")+resp.Header.Get("Levee-Error"), body, err))
				})
				return
			}
			ok.Add(1)
		})
	}

	// The backends hold every request until all n are inside levee at once:
	// perBE at each backend, the rest admitted and waiting for a connection.
	// Then they answer at once, and n requests churn through 2×16 connections.
	a := p.app("a")
	atBackends := func() int64 {
		var s int64
		for _, b := range bes {
			s += b.inflight.Load()
		}
		return s
	}
	stormWait(t, 20*time.Second, "5000 requests in levee at once, 32 of them at the backends", func() bool {
		return (a.limiter.InFlight() == n && atBackends() == nBackends*perBE) || failed.Load() > 0
	})
	if failed.Load() > 0 {
		openGate()
		wg.Wait()
		t.Fatalf("%d requests failed before the storm was released; first: %v", failed.Load(), errMsg.Load())
	}
	admitted := time.Since(start)
	openGate()
	stormWait(t, 30*time.Second, "every request answered", func() bool { return ok.Load()+failed.Load() == n })
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", f, n, errMsg.Load())
	}

	for i, b := range bes {
		t.Logf("backend %d: %d connections opened, peak %d open at once", i, b.opened.Load(), b.peak.Load())
		if got := b.opened.Load(); got > perBE {
			t.Errorf("backend %d: levee opened %d connections to it during the storm; max_conns_per_backend and max_idle_per_backend are %d, so it should reuse them", i, got, perBE)
		}
		if got := b.peak.Load(); got > perBE {
			t.Errorf("backend %d: %d connections open at once; max_conns_per_backend is %d", i, got, perBE)
		}
	}

	// TIME_WAIT belongs to the side that closes a connection first (sends
	// the first FIN); it lingers for 60 s on Linux. Toward a backend that is
	// levee whenever it drops an upstream connection itself: an idle
	// connection beyond max_idle_per_backend, an idle timeout, a reload or
	// shutdown. Were the pool too small, every surplus response would close
	// a connection and the next request dial another: one TIME_WAIT socket
	// per request, thousands in a storm, until the ephemeral ports run out.
	// With the idle pool as big as the connection bound, no connection is
	// closed during the storm, and even closing them all (as shutdown does
	// below) leaves at most one per pooled connection: 2 backends × 16.
	// Allow twice that, for a connection the backend or the kernel ends
	// early and levee redials.
	const bound = 2 * perBE * nBackends
	during := timeWaitTowards(t, ports, before)
	t.Logf("levee TIME_WAIT sockets toward the backends after the storm: %d", during)
	if during > bound {
		t.Errorf("%d TIME_WAIT sockets toward the backends after %d requests; want ≤ %d (bounded by the pool)", during, n, bound)
	}

	// Shutdown closes levee's idle upstream connections: levee closes first,
	// so levee holds their TIME_WAIT. Wait for the backends to see them close
	// (each closes its end on reading levee's FIN, which moves levee's socket
	// from FIN_WAIT2 to TIME_WAIT), then count again.
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stormWait(t, 10*time.Second, "the backends to see levee's upstream connections close", func() bool {
		for _, b := range bes {
			if b.open.Load() != 0 {
				return false
			}
		}
		return true
	})
	stormWait(t, 10*time.Second, "levee's closed upstream sockets to leave FIN_WAIT", func() bool {
		for _, s := range procTCPSockets(t) {
			// 04 FIN_WAIT1, 05 FIN_WAIT2, 0B CLOSING: not yet in TIME_WAIT.
			if ports[hexPort(s.remote)] && (s.state == "04" || s.state == "05" || s.state == "0B") {
				return false
			}
		}
		return true
	})
	after := timeWaitTowards(t, ports, before)
	t.Logf("levee TIME_WAIT sockets toward the backends after shutdown: %d; %d requests in %v (all admitted after %v)",
		after, n, time.Since(start).Round(time.Millisecond), admitted.Round(time.Millisecond))
	if after > bound {
		t.Errorf("%d TIME_WAIT sockets toward the backends after shutdown; want ≤ %d (one per pooled connection)", after, bound)
	}
}

// stormWait polls cond until it holds or d passes (a deadline that only
// catches a hang: 5,000 connections under -race on 2 cores take seconds).
func stormWait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}
