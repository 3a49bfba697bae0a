package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// countingBackend answers "one" after 30 ms, or, on /hold, once release
// is closed; it counts the requests in flight, and the most at once.
type countingBackend struct {
	inflight, most, held atomic.Int64
	release              chan struct{}
	addr                 string
}

func startCountingBackend(t *testing.T) *countingBackend {
	b := &countingBackend{release: make(chan struct{})}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
		}
		if r.URL.Path == "/hold" {
			b.held.Add(1)
			<-b.release
		} else {
			time.Sleep(30 * time.Millisecond) // the backend's work: requests overlap
		}
		io.WriteString(w, "one")
	}))
	// Closed before the server, so that a held request never blocks Close.
	t.Cleanup(s.Close)
	t.Cleanup(func() { b.open() })
	b.addr = s.Listener.Addr().String()
	return b
}

// open lets the held requests go (idempotent).
func (b *countingBackend) open() {
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

// handedOver waits for the nth handover in the log and returns the new
// generation's PID, without waiting for the old one's exit.
func (u *upgradeLevee) handedOver(n int) int {
	u.t.Helper()
	m := u.waitLogWithin(handedOverLine, n, upgradeWait)
	pid, _ := strconv.Atoi(m[1])
	u.pid.Store(int64(pid))
	return pid
}

// TestThreeGenerationsKeepTheConcurrency: two upgrades in quick
// succession leave three generations alive, the first still draining two
// requests held at the backend. The third holds slots for them (through
// the second, which passes the first's reports on), so the backend never
// has more than the app's concurrency of 4 in flight; the first reports
// to the end without a broken pipe, and once it exits, the third gives
// the slots back (the load reaches 4 of its own).
func TestThreeGenerationsKeepTheConcurrency(t *testing.T) {
	b := startCountingBackend(t)
	// The first drains for as long as the test holds its requests.
	u := startUpgradableWith(t, func(lock string) string {
		return strings.Replace(upgradeConfig(b.addr, lock, "    limits: {concurrency: 4, queue: {max_len: 64, max_wait: 5s}}\n"),
			"drain_timeout: 5s", "drain_timeout: 60s", 1)
	})
	first := int(u.pid.Load())

	held := make(chan error, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, u.proxy+"/hold", nil)
			req.Host = "a.test"
			code, body, err := do(&http.Client{Timeout: 2 * upgradeWait}, req)
			if err == nil && (code != 200 || body != "one") {
				err = fmt.Errorf("%d %q", code, body)
			}
			held <- err
		}()
	}
	leaktest.WaitFor(t, waitTimeout, "two requests held at the backend", func() bool { return b.held.Load() == 2 })

	if err := syscall.Kill(first, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	second := u.handedOver(1)
	if err := syscall.Kill(second, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	third := u.handedOver(2)
	if exited(first) {
		u.fatalf("the first levee exited with two requests in flight")
	}

	good := func(code int, body string) bool {
		return code == 200 && body == "one" || code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests
	}
	l := startPacedLoad(t, u.proxy, 8, 0, good)
	for range 40 {
		l.answeredWith(t, 200)
	}
	l.end()
	if l.bad.Load() > 0 {
		u.fatalf("%d requests failed; first: %v", l.bad.Load(), l.errs[:min(5, len(l.errs))])
	}
	if m := b.most.Load(); m > 4 {
		u.fatalf("the backend had %d requests in flight at once, the first levee's 2 among them; the app's concurrency is 4", m)
	}

	b.open()
	for range 2 {
		if err := <-held; err != nil {
			u.fatalf("a request held across both upgrades: %v", err)
		}
	}
	u.waitExit(first)
	u.waitExit(second)
	if strings.Contains(u.text(), "cannot report to the new levee") || strings.Contains(u.text(), "reports ended early") {
		u.fatalf("a report was lost between generations")
	}
	// The slots held for the first's requests are given back.
	b.most.Store(0)
	l = startPacedLoad(t, u.proxy, 8, 0, good)
	leaktest.WaitFor(t, waitTimeout, "the third levee to admit 4 at once", func() bool { return b.most.Load() == 4 })
	l.end()
	if pid := int(u.pid.Load()); pid != third || exited(third) {
		u.fatalf("the third levee (%d) should serve; serving: %d", third, pid)
	}
}
