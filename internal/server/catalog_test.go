package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/catalog/sqlitestore"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
)

// catalogFile writes apps (JSONL) to a new catalog file in a temporary
// directory; it returns the writer and a read-only store on the file.
func catalogFile(t *testing.T, jsonl string) (w, r *sqlitestore.Store) {
	t.Helper()
	return catalogFileAt(t, filepath.Join(t.TempDir(), "catalog.db"), jsonl)
}

// catalogFileAt is catalogFile at path.
func catalogFileAt(t *testing.T, path, jsonl string) (w, r *sqlitestore.Store) {
	t.Helper()
	w, err := sqlitestore.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	putApps(t, w, jsonl)
	r, err = sqlitestore.Open(path, sqlitestore.Options{Conns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return w, r
}

func putApps(t *testing.T, w *sqlitestore.Store, jsonl string) {
	t.Helper()
	apps, err := config.ReadImport("apps.jsonl", strings.NewReader(jsonl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(context.Background(), apps, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// startCatalogProxy is startProxy with a catalog store.
func startCatalogProxy(t *testing.T, yamlCfg string, st catalog.Store) *proxy {
	t.Helper()
	return startProxyOptions(t, yamlCfg, Options{Catalog: st})
}

// catalogStats is the catalog's gauges; the server must have a catalog.
func (s *Server) catalogStats() catalog.LazyStats { return s.lazy.Stats() }

func storedApp(name, host, backend string, extra string) string {
	return fmt.Sprintf(`{"name":%q,"hosts":[%q],"backends":[%q]%s}`+"\n", name, host, backend, extra)
}

// TestCatalogServesStoredAppsBesideTheFile: a host the config file does not
// claim is routed by the catalog; where both claim a host and path, or an
// app name, the file wins; a host neither knows gets 404.
func TestCatalogServesStoredAppsBesideTheFile(t *testing.T) {
	var inflight, peak atomic.Int64
	fileBE := namedBackend(t, "file", &inflight, &peak)
	storeBE := namedBackend(t, "stored", &inflight, &peak)
	_, st := catalogFile(t, storedApp("s1", "s1.test", storeBE, "")+
		storedApp("clash", "a.test", storeBE, `,"paths":["/","/api"]`)+
		storedApp("a", "named-like-a.test", storeBE, ""))
	p := startCatalogProxy(t, fmt.Sprintf("apps:\n  a: {hosts: [a.test], paths: [/api], backends: [%s]}\n", fileBE), st)

	for _, c := range []struct {
		host, path string
		code       int
		body       string
	}{
		{"s1.test", "/", 200, "stored"},
		{"S1.test", "/x", 200, "stored"},
		{"a.test", "/api/x", 200, "file"},   // the file wins the same host and path
		{"a.test", "/other", 200, "stored"}, // a path the file does not route
		{"named-like-a.test", "/", 404, ""}, // a stored app named like a file app is ignored
		{"nobody.test", "/", 404, ""},
	} {
		resp := p.get(c.host, c.path)
		body := readAll(t, resp)
		if resp.StatusCode != c.code || (c.body != "" && body != c.body) {
			t.Errorf("%s%s: %d %q, want %d %q", c.host, c.path, resp.StatusCode, body, c.code, c.body)
		}
	}
	if _, ok := p.srv.Table().AppStats("s1"); !ok {
		t.Error("the stored app has no state in the server")
	}
	if got := p.metric("levee_requests_total", map[string]string{"app": "s1", "code": "200"}); got != 2 {
		t.Errorf("s1 requests = %v, want 2", got)
	}
}

// gatedStore holds every ForHost until its gate opens: a catalog file
// answering slowly (a 500 ms query), without the test sleeping.
type gatedStore struct {
	catalog.Store
	pass    atomic.Bool // no gate: answer at once
	gate    chan struct{}
	started chan string
	queries atomic.Int64
	mu      sync.Mutex // guards gate
}

func (g *gatedStore) ForHost(ctx context.Context, host string) ([]catalog.Record, error) {
	g.queries.Add(1)
	if g.pass.Load() {
		return g.Store.ForHost(ctx, host)
	}
	g.mu.Lock() // the test swaps gate; what orders the two is a socket, unseen by -race
	gate := g.gate
	g.mu.Unlock()
	g.started <- host
	select {
	case <-gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Store.ForHost(ctx, host)
}

// TestCatalogBusyAnswers503AtOnce: with the loader saturated by a slow
// store, a cold host gets 503 catalog-busy with Retry-After at once, while
// a cached app is served without touching the store.
func TestCatalogBusyAnswers503AtOnce(t *testing.T) {
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	_, st := catalogFile(t, storedApp("hot", "hot.test", be, "")+storedApp("cold1", "cold1.test", be, "")+
		storedApp("cold2", "cold2.test", be, ""))
	g := &gatedStore{Store: st, gate: make(chan struct{}), started: make(chan string, 4)}
	p := startCatalogProxy(t, "catalog: {sqlite: unused-in-test.db, loader: {concurrency: 1, max_waiters: 0, retry_after: 2s}}\n", g)

	close(g.gate) // warm the hot app
	<-func() chan struct{} {
		d := make(chan struct{})
		go func() { readAll(t, p.get("hot.test", "/")); close(d) }()
		return d
	}()
	<-g.started
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() {
		resp := p.get("cold1.test", "/")
		if body := readAll(t, resp); resp.StatusCode != 200 || body != "stored" {
			t.Errorf("cold1 after the store recovered: %d %q", resp.StatusCode, body)
		}
	})
	<-g.started // cold1 holds the only query slot
	q := g.queries.Load()
	resp := p.get("cold2.test", "/")
	readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Levee-Reject") != "catalog-busy" || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("cold host while the loader is saturated: %d %v", resp.StatusCode, resp.Header)
	}
	for range 20 {
		resp := p.get("hot.test", "/")
		if body := readAll(t, resp); resp.StatusCode != 200 || body != "stored" {
			t.Fatalf("cached app while the loader is saturated: %d %q", resp.StatusCode, body)
		}
	}
	if g.queries.Load() != q {
		t.Error("a refused or cached request queried the store")
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "", "reason": "catalog-busy"}); got != 1 {
		t.Errorf("levee_rejected_total{reason=catalog-busy} = %v, want 1", got)
	}
	close(g.gate)
	wg.Wait()
}

// TestCatalogEvictionReleasesAppState: past catalog.cache.max_apps the
// least useful app is evicted and its server state released.
func TestCatalogEvictionReleasesAppState(t *testing.T) {
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	var jsonl strings.Builder
	for i := range 3 {
		jsonl.WriteString(storedApp(fmt.Sprint("app", i), fmt.Sprintf("app%d.test", i), be, ""))
	}
	_, st := catalogFile(t, jsonl.String())
	p := startCatalogProxy(t, "catalog: {sqlite: unused-in-test.db, cache: {max_apps: 1}}\n", st)
	for i := range 3 {
		readAll(t, p.get(fmt.Sprintf("app%d.test", i), "/"))
	}
	s := p.srv.catalogStats()
	stored := 0
	list, _ := p.srv.Table().Apps(0)
	for _, a := range list {
		if a.Stored {
			stored++
		}
	}
	if stored != s.Apps || s.Apps != s.Hosts {
		t.Errorf("server holds %d stored apps, the catalog caches %d apps for %d hosts", stored, s.Apps, s.Hosts)
	}
}

// TestCatalogChangesApplyWithoutRestart: a changed limit of a cached app
// applies after the watcher's poll; a deleted app answers 404.
func TestCatalogChangesApplyWithoutRestart(t *testing.T) {
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	w, st := catalogFile(t, storedApp("s", "s.test", be, ""))
	p := startCatalogProxy(t, "catalog: {sqlite: unused-in-test.db, watch: 1h}\n", st)
	if resp := p.get("s.test", "/"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	putApps(t, w, storedApp("s", "s.test", be, `,"limits":{"body":10}`))
	if _, err := p.srv.lazy.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/", strings.NewReader("more than ten bytes"))
	req.Host = "s.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("after limits.body changed to 10: %d, want 413", resp.StatusCode)
	}
	if _, err := w.Delete(context.Background(), []string{"s"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	p.srv.lazy.Poll(context.Background())
	if resp := p.get("s.test", "/"); resp.StatusCode != 404 {
		t.Errorf("after delete: %d, want 404", resp.StatusCode)
	}
	if _, ok := p.srv.Table().AppStats("s"); ok {
		t.Error("a deleted app's state is still held")
	}
}

// TestCatalogReloadRecomposesStoredApps: a reload composes the cached
// stored apps again on the new config; a file app taking a stored app's
// name wins, and the stored one is dropped.
func TestCatalogReloadRecomposesStoredApps(t *testing.T) {
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	fileBE := namedBackend(t, "file", &inflight, &peak)
	_, st := catalogFile(t, storedApp("s", "s.test", be, ""))
	base := "catalog: {sqlite: unused-in-test.db}\n"
	p := startCatalogProxy(t, base, st)
	readAll(t, p.get("s.test", "/"))
	before, _ := p.srv.lazy.Load(context.Background(), "s.test", "/")

	if err := p.srv.Reload(mustParse(t, base+"upstream: {dial_timeout: 3s}\n")); err != nil {
		t.Fatal(err)
	}
	after, err := p.srv.lazy.Load(context.Background(), "s.test", "/")
	if err != nil || after == before || after.app != before.app {
		t.Errorf("after reload: route %p (was %p), app kept %v, err %v", after, before, after != nil && after.app == before.app, err)
	}
	if resp := p.get("s.test", "/"); readAll(t, resp) != "stored" {
		t.Error("the stored app is not served after a reload")
	}
	if err := p.srv.Reload(mustParse(t, base+fmt.Sprintf("apps:\n  s: {hosts: [file.test], backends: [%s]}\n", fileBE))); err != nil {
		t.Fatal(err)
	}
	if resp := p.get("s.test", "/"); resp.StatusCode != 404 {
		t.Errorf("a stored app named like a file app: %d, want 404", resp.StatusCode)
	}
	if resp := p.get("file.test", "/"); readAll(t, resp) != "file" {
		t.Error("the file app is not served")
	}
	if err := p.srv.Reload(mustParse(t, "catalog: {sqlite: other.db}\n")); err == nil {
		t.Error("a reload changing catalog was accepted")
	}
}

// mapStore is a catalog of apps app<i> on host h<i>.test, all on one
// backend, in memory.
type mapStore struct{ backend string }

func (m mapStore) ForHost(_ context.Context, host string) ([]catalog.Record, error) {
	name, ok := strings.CutSuffix(host, ".test")
	if !ok || !strings.HasPrefix(name, "h") {
		return nil, nil
	}
	return []catalog.Record{{Name: "app" + name[1:], Version: 1, Hosts: []string{host}, Paths: []string{"/"},
		Config: []byte(fmt.Sprintf(`{"hosts":[%q],"backends":[%q]}`, host, m.backend))}}, nil
}
func (mapStore) Apps(context.Context, []string) ([]catalog.Record, error)      { return nil, nil }
func (mapStore) Changes(context.Context, int64, int) ([]catalog.Change, error) { return nil, nil }
func (mapStore) Version(context.Context) (int64, error)                        { return 0, nil }

// BenchmarkStoredAppMemory reports the heap of one stored app composed by
// the server (limiter, pools, rate table, metrics, route), beside the
// catalog cache's own cost (BenchmarkCatalogCachedLookup in sqlitestore):
// what catalog.cache.max_apps multiplies.
func BenchmarkStoredAppMemory(b *testing.B) {
	const n = 2000
	cfg := mustParse(b, "catalog: {sqlite: unused-in-bench.db, cache: {max_apps: 100000}, loader: {rate: \"off\"}}\n")
	s := New(cfg, Options{Catalog: mapStore{backend: "127.0.0.1:9"}, Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(s.lazy.Close)
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if _, err := s.lazy.Load(ctx, fmt.Sprintf("h%d.test", i), "/"); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for b.Loop() {
		s.lazy.Lookup("h1.test", "/")
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heapB/stored-app")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/stored-app")
}

// TestCatalogEvictionKeepsTheRateState: an app evicted from the cache and
// loaded again before its buckets refill takes its rate state back — an
// eviction (which a scan of cold hosts can force) never hands out a fresh
// burst. Once the state has settled it is dropped.
func TestCatalogEvictionKeepsTheRateState(t *testing.T) {
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	jsonl := storedApp("limited", "limited.test", be, `,"limits":{"rate":"10/s","burst":3}`) +
		storedApp("other", "other.test", be, "")
	_, st := catalogFile(t, jsonl)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyOptions(t, "catalog: {sqlite: unused-in-test.db, cache: {max_apps: 1}}\n", Options{Catalog: st, Clock: clk})
	status := func(host string) int {
		t.Helper()
		r := p.get(host, "/")
		readAll(t, r)
		return r.StatusCode
	}
	for i := range 3 {
		if c := status("limited.test"); c != http.StatusOK {
			t.Fatalf("request %d of the burst: %d", i+1, c)
		}
	}
	if c := status("limited.test"); c != http.StatusTooManyRequests {
		t.Fatalf("past the burst: %d, want 429", c)
	}
	if c := status("other.test"); c != http.StatusOK { // evicts limited
		t.Fatalf("other app: %d", c)
	}
	if s := p.srv.catalogStats(); s.Apps != 1 {
		t.Fatalf("catalog caches %d apps, want 1 (limited evicted)", s.Apps)
	}
	if c := status("limited.test"); c != http.StatusTooManyRequests {
		t.Fatalf("limited loaded again at once: %d, want 429 (a fresh burst after eviction)", c)
	}
	clk.Advance(100 * time.Millisecond) // one request's worth
	if c := status("limited.test"); c != http.StatusOK {
		t.Fatalf("one interval later: %d, want 200", c)
	}
	status("other.test") // evict limited again, then let its state settle
	clk.Advance(apps.ParkMin + time.Second)
	for i := range 3 {
		if c := status("limited.test"); c != http.StatusOK {
			t.Fatalf("after settling, request %d of a full burst: %d", i+1, c)
		}
	}
}

// hungStore is a catalog store on a hung filesystem: every call blocks,
// deaf to its context, until released. lookups counts the ForHost calls.
type hungStore struct {
	release chan struct{}
	lookups *atomic.Int64
}

func (h hungStore) ForHost(context.Context, string) ([]catalog.Record, error) {
	h.lookups.Add(1)
	<-h.release
	return nil, nil
}
func (h hungStore) Apps(context.Context, []string) ([]catalog.Record, error) {
	<-h.release
	return nil, nil
}
func (h hungStore) Changes(context.Context, int64, int) ([]catalog.Change, error) {
	<-h.release
	return nil, nil
}
func (h hungStore) Version(context.Context) (int64, error) {
	<-h.release
	return 0, nil
}

// SIGTERM finishes by the drain deadline even when the catalog's store
// never answers: the watch and the loads stuck in it are left behind.
func TestShutdownEndsWithTheCatalogStoreHung(t *testing.T) {
	st := hungStore{release: make(chan struct{}), lookups: new(atomic.Int64)}
	defer close(st.release)
	p := startProxyOptions(t, "server: {drain_timeout: 500ms}\ncatalog: {sqlite: unused-in-test.db}\n", Options{Catalog: st})
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
	req.Host = "stored.test"
	go func() { // a load that will never end
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the load stuck in the store", func() bool { return st.lookups.Load() == 1 })
	done := make(chan error, 1)
	go func() { done <- p.Stop() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not stop with its catalog store hung")
	}
	if !strings.Contains(p.logs.String(), "gave up waiting at the drain deadline") {
		t.Fatalf("nothing logged of what was left running:\n%s", p.logs.String())
	}
}
