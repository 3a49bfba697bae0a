package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/redistest"
)

// clusterProxies starts n levee servers sharing one Redis and one fake
// clock, each with app a limited to limits. A generous Redis timeout: a
// loaded test machine must not look like a Redis failure.
func clusterProxies(t *testing.T, r *redistest.Server, n int, limits string) ([]*proxy, *clock.Fake) {
	t.Helper()
	return clusterProxiesTimeout(t, r, n, limits, 2*time.Second)
}

// clusterProxiesTimeout is clusterProxies with cluster.redis.timeout set.
func clusterProxiesTimeout(t *testing.T, r *redistest.Server, n int, limits string, timeout time.Duration) ([]*proxy, *clock.Fake) {
	t.Helper()
	be := newBodyBackend(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	ps := make([]*proxy, n)
	for i := range ps {
		ps[i] = startProxyClock(t, fmt.Sprintf(`
cluster:
  redis: {addrs: [%s], timeout: %v}
  lease: 50ms
  key_prefix: %s
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: %s
`, r.Addr(), timeout, "e2e-"+testProto(), be.addr(), limits), clk)
	}
	return ps, clk
}

// TestClusterLimitIsSharedAcrossServers: three levee servers, one Redis, 5x
// the limit offered unevenly: together they admit what one would alone.
func TestClusterLimitIsSharedAcrossServers(t *testing.T) {
	r := redistest.Start(t)
	ps, clk := clusterProxies(t, r, 3, "{rate: 100/s, burst: 10}")
	share := []int{0, 0, 0, 1, 1, 2} // 3:2:1
	admitted, refused := 0, 0
	for step := range 60 { // 3 s of fake time in 50 ms steps, 500 requests/s offered
		for i := range 25 {
			switch code := ps[share[(step*25+i)%len(share)]].getAs("").StatusCode; code {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				refused++
			default:
				t.Fatalf("status %d; want 200 or 429", code)
			}
		}
		clk.Advance(50 * time.Millisecond)
	}
	// Arrivals span [0, 2.95 s]: GCRA admits at most burst 10 + ⌊2.95 × 100⌋ = 305
	// in all; leases still held at the end may leave a few unspent.
	if admitted > 305 || admitted < 305*98/100 {
		t.Errorf("three servers admitted %d of %d; want 305 at most and ≥ 98%% of it", admitted, admitted+refused)
	}
	t.Logf("admitted %d, refused %d", admitted, refused)
	for i, p := range ps {
		if got := p.metric("levee_cluster_degraded", nil); got != 0 {
			t.Errorf("server %d: levee_cluster_degraded = %v with Redis up", i, got)
		}
	}

	// Redis gone: serving goes on, under each server's share, and says so.
	r.Stop()
	for range 20 {
		for _, p := range ps {
			if code := p.getAs("").StatusCode; code != http.StatusOK && code != http.StatusTooManyRequests {
				t.Fatalf("with Redis down: status %d; want 200 or 429", code)
			}
		}
		clk.Advance(50 * time.Millisecond)
	}
	for i, p := range ps {
		if got := p.metric("levee_cluster_degraded", nil); got != 1 {
			t.Errorf("server %d: levee_cluster_degraded = %v with Redis down; want 1", i, got)
		}
	}

	// Redis back (empty): the first request after the probe gap (1 s here:
	// twice the timeout, at most the heartbeat) reconnects, and the limit is
	// exact again.
	r.Restart()
	clk.Advance(time.Second)
	admitted = 0
	for step := range 40 { // 2 s in 50 ms steps, 500 requests/s offered
		for i := range 25 {
			if ps[share[(step*25+i)%len(share)]].getAs("").StatusCode == http.StatusOK {
				admitted++
			}
		}
		clk.Advance(50 * time.Millisecond)
	}
	for i, p := range ps {
		if got := p.metric("levee_cluster_degraded", nil); got != 0 {
			t.Errorf("server %d: levee_cluster_degraded = %v after Redis came back; want 0", i, got)
		}
	}
	// A fresh burst 10 + ⌊1.95 × 100⌋ = 205, plus at most a lease (5) per
	// server held from before the outage.
	if admitted > 205+3*5 || admitted < 205*98/100 {
		t.Errorf("after recovery three servers admitted %d; want 205 (+15 held leases at most), ≥ 98%% of it", admitted)
	}
	t.Logf("after recovery: admitted %d", admitted)
}

// TestReloadRefusesClusterChanges: the Redis connection and the leases are
// fixed for the server's life; a reload that changes them changes nothing.
func TestReloadRefusesClusterChanges(t *testing.T) {
	base := "apps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:1]\n"
	s := New(mustParse(t, "cluster: {redis: {addrs: [127.0.0.1:1]}}\n"+base), Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { s.apps.Close() })
	for _, c := range []string{
		"cluster: {redis: {addrs: [127.0.0.1:2]}}\n",
		"cluster: {redis: {addrs: [127.0.0.1:1]}, lease: 20ms}\n",
		"", // cluster mode off
	} {
		err := s.Reload(mustParse(t, c+base))
		if err == nil || !strings.Contains(err.Error(), "cluster settings changed") {
			t.Errorf("reload with %q: %v; want refused for a restart", c, err)
		}
	}
	if err := s.Reload(mustParse(t, "cluster: {redis: {addrs: [127.0.0.1:1]}}\n"+base)); err != nil {
		t.Errorf("reload with the same cluster settings: %v", err)
	}
}

// TestClusterDividesBandwidth: each live instance paces limits.bandwidth to
// its share by demand, learnt from heartbeats: with no demand anywhere an
// even split, and the whole rate once the other has left (without ever
// rebuilding the limiter).
func TestClusterDividesBandwidth(t *testing.T) {
	r := redistest.Start(t)
	be := newBodyBackend(t)
	cfg := fmt.Sprintf(`
cluster: {redis: {addrs: [%s], timeout: 2s}, heartbeat: 100ms, key_prefix: bw-%s}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {bandwidth: {rate: 1MB/s}}
`, r.Addr(), testProto(), be.addr())
	ps := []*proxy{startProxy(t, cfg), startProxy(t, cfg)}
	rate := func(p *proxy) int64 {
		p.srv.mu.Lock()
		defer p.srv.mu.Unlock()
		return p.srv.view("a").Bandwidth.Rate()
	}
	lim := func(p *proxy) *bandwidth.Limiter {
		p.srv.mu.Lock()
		defer p.srv.mu.Unlock()
		return p.srv.view("a").Bandwidth
	}
	first := lim(ps[0])
	deadline := time.Now().Add(10 * time.Second)
	for rate(ps[0]) != 500_000 || rate(ps[1]) != 500_000 {
		if time.Now().After(deadline) {
			t.Fatalf("bandwidth rates %d and %d after 10 s; want 500000 each (1MB/s ÷ 2 live)", rate(ps[0]), rate(ps[1]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	ps[1].Stop() // leaves the live set: the other takes the whole rate again
	for rate(ps[0]) != 1_000_000 {
		if time.Now().After(deadline) {
			t.Fatalf("bandwidth rate %d after the other left; want 1000000", rate(ps[0]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lim(ps[0]) != first {
		t.Fatal("the bandwidth limiter was rebuilt when the live instances changed")
	}
}
