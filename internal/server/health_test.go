package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// countingBackend answers its name and counts requests; /healthz answers
// healthCode.
func countingBackend(t *testing.T, healthCode *atomic.Int64) (addr string, served *atomic.Int64) {
	served = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(int(healthCode.Load()))
			return
		}
		served.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), served
}

func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A backend that refuses connections is ejected after
// consecutive_failures, and traffic goes on to the healthy one.
func TestFailingBackendIsEjected(t *testing.T) {
	var ok200 atomic.Int64
	ok200.Store(200)
	good, served := countingBackend(t, &ok200)
	dead := deadAddr(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s, %s]
    balance: round_robin
    ejection: {consecutive_failures: 2, base_time: 1m}
    retry: {attempts: 1}
`, good, dead))
	failed := 0
	for range 6 { // round robin: the dead backend's 2nd failure ejects it
		if resp := p.get("a.test", "/"); resp.StatusCode != 200 {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("%d requests failed before ejection; want exactly consecutive_failures = 2", failed)
	}
	for range 20 {
		if resp := p.get("a.test", "/"); resp.StatusCode != 200 {
			t.Fatalf("after ejection a request got %d; want 200 from the healthy backend", resp.StatusCode)
		}
	}
	if served.Load() != 24 {
		t.Fatalf("healthy backend served %d; want 24", served.Load())
	}
	st, _ := p.srv.Table().AppStats("a")
	for _, b := range st.Backends {
		if b.Addr == dead && b.Healthy {
			t.Fatal("the dead backend is reported healthy")
		}
	}
}

// Active checks take a backend whose /healthz fails out of balancing; when
// every backend is down, requests fail fast with 503 no-backend.
func TestHealthChecksTakeBackendsOutAndNoBackendIs503(t *testing.T) {
	var codeA, codeB atomic.Int64
	codeA.Store(200)
	codeB.Store(500)
	a, servedA := countingBackend(t, &codeA)
	b, servedB := countingBackend(t, &codeB)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s, %s]
    health: {path: /healthz, interval: 1s, timeout: 1s, healthy: 1, unhealthy: 1}
`, a, b), clk)
	healthy := func(addr string) bool {
		st, _ := p.srv.Table().AppStats("a")
		for _, be := range st.Backends {
			if be.Addr == addr {
				return be.Healthy
			}
		}
		return false
	}
	waitFor(t, "the first round of checks to mark b unhealthy", func() bool { return !healthy(b) })
	for range 20 {
		if resp := p.get("a.test", "/"); resp.StatusCode != 200 {
			t.Fatalf("status %d; want 200 from a", resp.StatusCode)
		}
	}
	if servedA.Load() != 20 || servedB.Load() != 0 {
		t.Fatalf("served a=%d b=%d; want all 20 on a", servedA.Load(), servedB.Load())
	}
	codeA.Store(503)
	waitFor(t, "a to be marked unhealthy on a later round", func() bool {
		clk.Advance(time.Second) // the next round is due a second after the last ended
		return !healthy(a)
	})
	resp := p.get("a.test", "/")
	readAll(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get("Levee-Reject") != "no-backend" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("all backends down: %d %q; want 503 no-backend with Retry-After", resp.StatusCode, resp.Header.Get("Levee-Reject"))
	}
}
