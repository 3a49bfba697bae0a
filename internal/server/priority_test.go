package server

import (
	"fmt"
	"net/http"
	"testing"
)

// A full queue makes room for a critical request by shedding a sheddable
// waiter; the critical one is then served first.
func TestCriticalDisplacesSheddableInAFullQueue(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits:
      concurrency: 1
      queue: {max_wait: 30s, max_len: 1, target: 1m}
      priority: {paths: {/prefetch: sheddable, /checkout: critical}}
`, be.addr()))
	a := p.app("a")
	first, prefetch, checkout := make(chan *http.Response, 1), make(chan *http.Response, 1), make(chan *http.Response, 1)
	p.asyncGet("a.test", "/", first)
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })
	p.asyncGet("a.test", "/prefetch/img", prefetch)
	waitFor(t, "the prefetch to queue", func() bool { return a.Limiter.Queued() == 1 })
	p.asyncGet("a.test", "/checkout", checkout)
	r := <-prefetch
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Levee-Reject") != "shed" {
		t.Fatalf("sheddable waiter: %d %q; want 503 shed when a critical request needs its place", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	be.open()
	if r := <-first; r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	if r := <-checkout; r.StatusCode != 200 {
		t.Fatalf("critical: %d; want 200", r.StatusCode)
	}
}

// With fair sharing, a client at its share is refused at once while
// another client within its share waits for a slot and is served.
func TestFairShareRefusesTheHeavyClientFirst(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits:
      concurrency: 2
      queue: {max_wait: 30s, max_len: 10, target: 1m}
      client: {key: header:X-Api-Key}
      fair_share: true
`, be.addr()))
	held := make(chan *http.Response, 2)
	p.asyncGetAs("abuser", held)
	p.asyncGetAs("abuser", held)
	waitFor(t, "the abuser to hold both slots", func() bool { return be.inflight.Load() == 2 })
	extra := make(chan *http.Response, 1)
	p.asyncGetAs("abuser", extra)
	if r := <-extra; r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Levee-Reject") != "client-share" {
		t.Fatalf("abuser beyond its share: %d %q; want 503 client-share", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	polite := make(chan *http.Response, 1)
	p.asyncGetAs("polite", polite)
	waitFor(t, "the polite client to queue", func() bool { return p.app("a").Limiter.Queued() == 1 })
	be.open()
	if r := <-polite; r.StatusCode != 200 {
		t.Fatalf("client within its share: %d; want 200", r.StatusCode)
	}
	for range 2 {
		if r := <-held; r.StatusCode != 200 {
			t.Fatalf("abuser's admitted requests: %d", r.StatusCode)
		}
	}
}
