package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
)

// BenchmarkStoredAppCompose reports the CPU of a cold app: each op loads a
// host never loaded before from an in-memory store, composes its app
// (default limits) and, the cache being full, evicts and releases another:
// what a wave of distinct cold hosts costs the server per host, beside the
// store's query (BenchmarkCatalogColdLoad in sqlitestore).
func BenchmarkStoredAppCompose(b *testing.B) {
	cfg := mustParse(b, "catalog: {sqlite: unused-in-bench.db, cache: {max_apps: 1000}, loader: {rate: \"off\"}}\n")
	s := New(cfg, Options{Catalog: mapStore{backend: "127.0.0.1:9"}, Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(s.lazy.Close)
	ctx := context.Background()
	i := 0
	load := func() {
		if _, err := s.lazy.Load(ctx, fmt.Sprintf("h%d.test", i), "/"); err != nil {
			b.Fatal(err)
		}
		i++
	}
	for range 2000 { // a full cache: every load below evicts one
		load()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		load()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/compose")
}

// heapPerStoredApp composes n stored apps (default limits, one backend)
// and returns the heap they hold, per app, as BenchmarkStoredAppMemory
// measures it.
func heapPerStoredApp(t testing.TB, n int) float64 {
	cfg := mustParse(t, "catalog: {sqlite: unused-in-test.db, cache: {max_apps: 100000}, loader: {rate: \"off\"}}\n")
	s := New(cfg, Options{Catalog: mapStore{backend: "127.0.0.1:9"}, Logger: slog.New(slog.DiscardHandler)})
	defer s.lazy.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if _, err := s.lazy.Load(context.Background(), fmt.Sprintf("h%d.test", i), "/"); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// Two apps on one backend address share one connection pool, and
// upstream.max_conns_per_backend bounds the connections to that address
// across both; releasing the last app using it closes its idle
// connections, and a reload that changes the upstream settings makes new
// pools and closes the old ones' idle connections.
func TestAppsShareTheBackendPool(t *testing.T) {
	release := make(chan struct{})
	be := newStormBackend(t, release)
	base := "upstream: {max_conns_per_backend: 2, max_idle_per_backend: 2}\n"
	apps := fmt.Sprintf("apps:\n  a: {hosts: [a.test], backends: [%s]}\n  b: {hosts: [b.test], backends: [%s]}\n", be.addr(), be.addr())
	p := startProxy(t, base+apps)
	if n := p.srv.apps.Upstreams().Len(); n != 1 {
		t.Fatalf("%d pools for two apps on one backend, want 1", n)
	}
	var wg sync.WaitGroup
	for i := range 6 {
		host := []string{"a.test", "b.test"}[i%2]
		wg.Go(func() {
			resp := p.get(host, "/")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	// Every request past admission: two at the backend, four in the pool
	// with no connection to take. A pool per app, or no bound, would have
	// them dial at once, and the connections opened stay open (idle), so
	// the backend's peak would show them.
	waitFor(t, "two connections and six requests in flight", func() bool {
		return be.open.Load() >= 2 && p.metric("levee_inflight", map[string]string{"app": "a"})+
			p.metric("levee_inflight", map[string]string{"app": "b"}) == 6
	})
	close(release)
	wg.Wait()
	if pk := be.peak.Load(); pk != 2 {
		t.Fatalf("%d connections at once to the backend of two apps, want max_conns_per_backend 2", pk)
	}
	if be.open.Load() == 0 {
		t.Fatal("no idle connection kept")
	}
	// A reload with new upstream settings: new pools, the old ones' idle
	// connections closed.
	if err := p.srv.Reload(mustParse(t, "upstream: {max_conns_per_backend: 3, max_idle_per_backend: 2}\n"+apps)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle connections closed", func() bool { return be.open.Load() == 0 })
	if n := p.srv.apps.Upstreams().Len(); n != 1 {
		t.Fatalf("%d pools after the reload, want 1", n)
	}
	readAll(t, p.get("a.test", "/"))
	// One app goes: the pool stays for the other.
	if err := p.srv.Reload(mustParse(t, "upstream: {max_conns_per_backend: 3, max_idle_per_backend: 2}\n"+fmt.Sprintf("apps:\n  b: {hosts: [b.test], backends: [%s]}\n", be.addr()))); err != nil {
		t.Fatal(err)
	}
	if n := p.srv.apps.Upstreams().Len(); n != 1 || be.open.Load() == 0 {
		t.Fatalf("with one app left: %d pools, %d connections; want the pool and its idle connection kept", n, be.open.Load())
	}
	// The last goes: the pool is dropped and its idle connection closed.
	if err := p.srv.Reload(mustParse(t, "upstream: {max_conns_per_backend: 3, max_idle_per_backend: 2}\n")); err != nil {
		t.Fatal(err)
	}
	if n := p.srv.apps.Upstreams().Len(); n != 0 {
		t.Fatalf("%d pools with no app left, want 0", n)
	}
	waitFor(t, "idle connections closed", func() bool { return be.open.Load() == 0 })
}

// A stored app released by the catalog gives its pool back: the last one
// on a backend closes its idle connections.
func TestReleasedStoredAppClosesTheSharedPool(t *testing.T) {
	release := make(chan struct{})
	close(release)
	be := newStormBackend(t, release)
	cfg := mustParse(t, "catalog: {sqlite: unused-in-test.db, cache: {max_apps: 1}}\n")
	s := New(cfg, Options{Catalog: mapStore{backend: be.addr()}, Logger: slog.New(slog.DiscardHandler)})
	defer s.lazy.Close()
	rt, err := s.lazy.Load(context.Background(), "h1.test", "/")
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	rt.pool.ServeHTTP(w, originRequest("h1.test"))
	if w.Code != http.StatusOK || be.open.Load() != 1 {
		t.Fatalf("status %d, %d connections open; want 200 and one idle", w.Code, be.open.Load())
	}
	if _, err := s.lazy.Load(context.Background(), "h2.test", "/"); err != nil { // evicts h1, same backend
		t.Fatal(err)
	}
	if n := s.apps.Upstreams().Len(); n != 1 || be.open.Load() != 1 {
		t.Fatalf("h2 on the same backend: %d pools, %d connections; want the pool kept", n, be.open.Load())
	}
	s.lazy.Close() // releases h2, the last app on the backend
	if n := s.apps.Upstreams().Len(); n != 0 {
		t.Fatalf("%d pools after the last app was released, want 0", n)
	}
	waitFor(t, "idle connections closed", func() bool { return be.open.Load() == 0 })
}
