package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// Issue 20, point 2: New builds and starts nothing; Serve starts every
// goroutine it needs and returns once they have; Close releases a Server
// whose Serve never ran.

// lifecycleConfig has what starts background work: an app with active
// health checks (its checker), and a second listener.
func lifecycleConfig(backend string) string {
	return fmt.Sprintf(`listen: [127.0.0.1:0, 127.0.0.1:0]
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    health: {path: /health, interval: 100ms, timeout: 100ms}
`, backend)
}

// openFiles counts the process's open descriptors (Linux), or -1.
func openFiles() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// expectFilesBack waits until the process has at most want descriptors
// open (others' may close meanwhile; none of ours may stay).
func expectFilesBack(t *testing.T, want int, what string) {
	t.Helper()
	if want >= 0 {
		leaktest.WaitFor(t, leaktest.Wait, fmt.Sprintf("at most the %d descriptors open before, %s", want, what),
			func() bool { return openFiles() <= want })
	}
}

// leveeGoroutines are the goroutines running now that levee's code
// started (their stack's "created by" names a levee package), by header
// ("goroutine N"): not the runtime's or a timer's, which an earlier test
// may leave to start at any moment.
func leveeGoroutines() map[string]string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/leveeproxy/levee/") {
			head, _, _ := strings.Cut(g, " [")
			out[head] = g
		}
	}
	return out
}

func TestNewStartsNoGoroutine(t *testing.T) {
	leaktest.Check(t)
	be := newHealthBackend(t)
	files := openFiles()
	before := map[string]bool{}
	for id := range leveeGoroutines() {
		before[id] = true
	}
	s := New(mustParse(t, lifecycleConfig(be.addr())), Options{})
	for id, stack := range leveeGoroutines() {
		if !before[id] {
			t.Errorf("New started a goroutine; want none before Serve:\n%s", stack)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	expectFilesBack(t, files, "after New and Close")
}

// A start that fails part way releases everything through Close: no
// goroutine, no descriptor. Two ways: a listener's address is taken (Listen
// fails), or Listen succeeds and the caller then gives up (levee serve
// when the admin listener's address is taken).
func TestStartThatFailsLeaksNothing(t *testing.T) {
	leaktest.Check(t)
	be := newHealthBackend(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	files := openFiles()
	cfg := fmt.Sprintf("listen: [127.0.0.1:0, %s]\napps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    health: {path: /health, interval: 100ms, timeout: 100ms}\n",
		taken.Addr(), be.addr())
	s := New(mustParse(t, cfg), Options{})
	if err := s.Listen(); err == nil {
		t.Fatal("Listen bound an address already taken")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	expectFilesBack(t, files, "after a failed Listen and Close")

	s = New(mustParse(t, lifecycleConfig(be.addr())), Options{})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if openFiles() <= files {
		t.Fatal("Listen bound nothing")
	}
	if err := s.Close(); err != nil { // Serve never runs
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // twice is safe
		t.Fatal(err)
	}
	expectFilesBack(t, files, "after Listen and Close")
}

// Start, serve (with health checks running and requests forwarded),
// reload, stop: once Serve has returned, nothing it started runs and every
// descriptor it opened is closed.
func TestServeReturnsWithNothingLeft(t *testing.T) {
	leaktest.Check(t)
	be := newHealthBackend(t)
	files := openFiles()
	cfg := lifecycleConfig(be.addr())
	s := New(mustParse(t, cfg), Options{})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	tr := &http.Transport{}
	client := &http.Client{Transport: tr, Timeout: guard}
	get := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addrs()[0].String()+"/", nil)
		req.Host = "a.test"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d; want 200", resp.StatusCode)
		}
	}
	get()
	waitFor(t, "a health check", func() bool { return be.health.Load() > 0 })
	if err := s.Reload(mustParse(t, strings.Replace(cfg, "interval: 100ms", "interval: 150ms", 1))); err != nil {
		t.Fatal(err)
	}
	get()
	tr.CloseIdleConnections()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	if err := s.Close(); err != nil { // after Serve: nothing more to do
		t.Fatal(err)
	}
	expectFilesBack(t, files, "after Serve returned")
	// leaktest.Check, at cleanup: no goroutine of Serve's (a health
	// checker, a listener's, a background loop) still runs.
}

// healthBackend answers every request 200 and counts those to /health.
type healthBackend struct {
	*httptest.Server
	health atomic.Int64
}

func newHealthBackend(t *testing.T) *healthBackend {
	b := &healthBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			b.health.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *healthBackend) addr() string { return strings.TrimPrefix(b.URL, "http://") }
