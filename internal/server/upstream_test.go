package server

// End-to-end tests of levee's upstream connections (docs/architecture.md,
// "Upstream connections"): how long a backend may take, and that the pool
// keeps its connections rather than churn them. They run on both engines.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/observe"
)

// sseBackend sends an event stream of n events, gap apart, flushing each.
func sseBackend(t *testing.T, n int, gap time.Duration) string {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for i := range n {
			if i > 0 {
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
		}
	})
}

// readEvents reads an event stream to its end, returning the data lines
// and the error that ended it (nil for a clean end).
func readEvents(body io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	return events, sc.Err()
}

// A stream that lasts five times upstream.response_header_timeout, with each
// gap a fifteenth of it, arrives whole: the timeout bounds the wait for the
// headers and then each read's idleness, never the whole body.
func TestStreamOutlastsResponseHeaderTimeout(t *testing.T) {
	const (
		timeout = 600 * time.Millisecond
		gap     = timeout / 15
		n       = 75 // 5 × timeout
	)
	backend := sseBackend(t, n, gap)
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
	resp := p.get("photos.test", "/events")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	events, err := readEvents(resp.Body)
	if err != nil || len(events) != n {
		t.Fatalf("%d of %d events, ended by %v: the stream was cut off", len(events), n, err)
	}
	for i, e := range events {
		if e != fmt.Sprint(i) {
			t.Fatalf("event %d is %q", i, e)
		}
	}
}

// A backend that sends its headers and one event, then stalls: the body
// read that waits longer than upstream.response_header_timeout fails, the
// client's stream breaks off (it never ends as if complete) and levee
// closes the backend's connection, on both engines (fasthttp: backendConn's
// per-read deadline; net/http: forward's idleBody).
func TestStalledStreamEndsAfterResponseHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	stall := newGate()
	defer stall.open()
	closed := make(chan struct{}) // the backend saw levee close its connection
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 0\n\n")
		http.NewResponseController(w).Flush()
		if !stall.wait(r) {
			close(closed)
		}
	})
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
	resp := p.get("photos.test", "/events")
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" {
		t.Fatalf("first event %q (%v)", line, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()
	if err := recv(t, ended, "the stalled stream's end"); err == nil {
		t.Fatal("the stalled stream ended cleanly, as if complete; want it broken off")
	}
	recv(t, closed, "levee closing the stalled backend connection")
}

// connBackend is a backend that counts its open connections (a
// hijacked one counts as closed).
type connBackend struct {
	addr  string
	open  atomic.Int64
	dials atomic.Int64
}

func newConnBackend(t *testing.T, h http.HandlerFunc) *connBackend {
	t.Helper()
	b := &connBackend{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.dials.Add(1)
			b.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	b.addr = srv.Listener.Addr().String()
	return b
}

// After a burst of concurrent requests to one backend, levee keeps every
// connection of the burst open and reuses them, whatever
// max_idle_per_backend says (the pool is never smaller than the connections
// in use: none is closed only to be dialled again); with 0, it keeps none.
func TestBurstConnectionsAreKeptAndReused(t *testing.T) {
	const burst = 12
	for _, maxIdle := range []int64{0, 3} {
		t.Run(fmt.Sprintf("max_idle_%d", maxIdle), func(t *testing.T) {
			release := newGate()
			defer release.open()
			var arrived atomic.Int64
			be := newConnBackend(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/burst" {
					arrived.Add(1)
					release.wait(r)
				}
				io.WriteString(w, "ok "+r.URL.Path)
			})
			p := startProxy(t, photosApp(be.addr, "", fmt.Sprintf("upstream: {max_idle_per_backend: %d}\n", maxIdle)))
			done := make(chan error, burst)
			for range burst {
				go func() {
					req, _ := http.NewRequest(http.MethodGet, p.URL+"/burst", nil)
					req.Host = "photos.test"
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						var b []byte
						b, err = io.ReadAll(resp.Body)
						resp.Body.Close()
						if err == nil && (resp.StatusCode != http.StatusOK || string(b) != "ok /burst") {
							err = fmt.Errorf("%d %q", resp.StatusCode, b)
						}
					}
					done <- err
				}()
			}
			waitFor(t, "the whole burst at the backend", func() bool { return arrived.Load() == burst })
			if n := be.open.Load(); n != burst {
				t.Fatalf("%d connections open during the burst, want %d", n, burst)
			}
			release.open()
			for range burst {
				if err := recv(t, done, "a burst response"); err != nil {
					t.Fatal(err)
				}
			}
			if maxIdle == 0 {
				waitFor(t, "no idle connection", func() bool { return be.open.Load() == 0 })
				return
			}
			// The kept connections serve what comes next, again at the
			// burst's concurrency; none is dialled while one is idle.
			dials := be.dials.Load()
			for round := range 3 {
				var wg sync.WaitGroup
				for i := range burst {
					wg.Go(func() {
						resp, err := http.DefaultClient.Do(newGet(p, "/next"))
						if err != nil {
							t.Errorf("round %d request %d: %v", round, i, err)
							return
						}
						if body := readAll(t, resp); body != "ok /next" {
							t.Errorf("round %d request %d: %q", round, i, body)
						}
					})
				}
				wg.Wait()
			}
			if n := be.dials.Load() - dials; n != 0 {
				t.Errorf("%d dials after the burst with its connections kept, want 0", n)
			}
			if n := be.open.Load(); n != burst {
				t.Errorf("%d connections open after the burst, want all %d kept", n, burst)
			}
			if n := p.metric("levee_backend_dials_total", map[string]string{"backend": be.addr}); n != burst {
				t.Errorf("levee_backend_dials_total %v, want %d", n, burst)
			}
			// The API (and the dashboard's backend table) shows the same.
			st, _ := p.srv.Table().AppStats("photos")
			want := observe.ConnStats{Idle: burst, Dials: burst, Exchanges: 4 * burst, ReuseRatio: 0.75}
			waitFor(t, "the connections idle in the API", func() bool {
				st, _ = p.srv.Table().AppStats("photos")
				return len(st.Backends) == 1 && st.Backends[0].Conns == want
			})
		})
	}
}

// newGet is a GET of path for photos.test through p.
func newGet(p *proxy, path string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
	req.Host = "photos.test"
	return req
}

// The Bluesky failure inside a proxy: above its idle cap, every response
// that ends while more are in flight closes its backend connection, and
// the next request dials a new one (thousands of TIME_WAIT sockets a
// second). At 128 concurrent clients, twice the default
// max_idle_per_backend, levee dials each connection once: at most one
// dial per concurrent request, over 20 rounds.
func TestPoolDoesNotChurnAboveTheIdleCap(t *testing.T) {
	const clients, rounds = 128, 20
	be := newConnBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p := startProxy(t, photosApp(be.addr, "", ""))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Go(func() {
			for range rounds {
				resp, err := http.DefaultClient.Do(newGet(p, "/"))
				if err != nil {
					failed.Add(1)
					continue
				}
				if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed", n, clients*rounds)
	}
	dials := be.dials.Load()
	if dials > clients {
		t.Errorf("%d backend dials for %d requests from %d concurrent clients: the pool churns (at most %d)",
			dials, clients*rounds, clients, clients)
	}
	ex := p.metric("levee_backend_exchanges_total", map[string]string{"backend": be.addr})
	if ex != clients*rounds || p.metric("levee_backend_dials_total", map[string]string{"backend": be.addr}) != float64(dials) {
		t.Errorf("metrics: %v exchanges, %v dials; want %d and %d", ex,
			p.metric("levee_backend_dials_total", map[string]string{"backend": be.addr}), clients*rounds, dials)
	}
	t.Logf("%d requests, %d dials: reuse ratio %.4f", clients*rounds, dials, 1-float64(dials)/float64(clients*rounds))
}

// upgradeRequest is a WebSocket-style handshake for photos.test.
const upgradeRequest = "GET /chat HTTP/1.1\r\n" +
	"Host: photos.test\r\n" +
	"Connection: Upgrade\r\n" +
	"Upgrade: websocket\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"\r\n"

// upgrade sends raw (a handshake and any first bytes) to levee and reads the
// 101 and the backend's greeting.
func upgrade(t *testing.T, p *proxy, raw string) (*bufio.Reader, net.Conn) {
	t.Helper()
	br, conn := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "hello from backend\n" {
		t.Fatalf("greeting %q (%v)", line, err)
	}
	return br, conn
}

// An upgraded connection carries large messages both ways at once: 256 KiB
// sent while its echo comes back, more than either side's buffers hold.
func TestUpgradeLargeMessages(t *testing.T) {
	var upgrades atomic.Int32
	p := startProxy(t, photosApp(echoBackend(t, &upgrades), "", ""))
	br, conn := upgrade(t, p, upgradeRequest)
	for i := range 3 {
		msg := strings.Repeat(string(rune('a'+i)), 256<<10) + "\n"
		sent := make(chan error, 1)
		go func() { _, err := io.WriteString(conn, msg); sent <- err }()
		if line, err := br.ReadString('\n'); err != nil || line != "echo: "+msg {
			t.Fatalf("reply %d: %d bytes (%v), want %d", i, len(line), err, len("echo: "+msg))
		}
		if err := recv(t, sent, "the large message sent"); err != nil {
			t.Fatal(err)
		}
	}
}

// A client may send its first bytes in the same packet as the upgrade
// request, before the 101 (RFC 9110 §7.8 lets it): levee passes them on
// once the tunnel is up. Upgrades are HTTP/1.1, so fasthttp's: (net/http's
// ReverseProxy would drop client bytes buffered at the hijack, golang/go#80875).
func TestUpgradeClientSpeaksFirst(t *testing.T) {
	var upgrades atomic.Int32
	p := startProxy(t, photosApp(echoBackend(t, &upgrades), "", ""))
	br, conn := upgrade(t, p, upgradeRequest+"early\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: early\n" {
		t.Fatalf("reply %q (%v), want the early bytes echoed", line, err)
	}
	if _, err := io.WriteString(conn, "later\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo: later\n" {
		t.Fatalf("reply %q (%v)", line, err)
	}
}
