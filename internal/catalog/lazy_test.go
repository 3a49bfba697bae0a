package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// memStore is a Store in memory. gate, when set, holds every ForHost
// until it is closed or the load's deadline passes: a store answering in
// 500 ms, without the test sleeping for it.
type memStore struct {
	mu      sync.Mutex
	apps    map[string]Record
	changes []Change
	version int64
	gate    chan struct{}
	deaf    atomic.Bool  // the gate ignores the load's deadline, as a stalled SQLite read does
	queries atomic.Int64 // ForHost calls
	running atomic.Int64 // ForHost calls in progress
	maxRun  atomic.Int64
	started chan string // told each ForHost's host, if set
}

func newMemStore() *memStore { return &memStore{apps: map[string]Record{}} }

func (s *memStore) put(name string, hosts []string, paths ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	s.version++
	s.apps[name] = Record{Name: name, Config: []byte(name), Version: s.version, Hosts: hosts, Paths: paths}
	s.changes = append(s.changes, Change{Version: s.version, App: name, Hosts: hosts, At: time.Unix(0, 0)})
}

// note records a certificate change for hosts.
func (s *memStore) note(hosts ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	s.changes = append(s.changes, Change{Version: s.version, App: CertificateApp, Hosts: hosts, At: time.Unix(0, 0)})
}

func (s *memStore) del(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	delete(s.apps, name)
	s.changes = append(s.changes, Change{Version: s.version, App: name})
}

func (s *memStore) setGate(g chan struct{}) {
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
}

func (s *memStore) ForHost(ctx context.Context, host string) ([]Record, error) {
	s.queries.Add(1)
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for m := s.maxRun.Load(); n > m && !s.maxRun.CompareAndSwap(m, n); m = s.maxRun.Load() {
	}
	s.mu.Lock()
	gate, started := s.gate, s.started
	s.mu.Unlock()
	if started != nil {
		started <- host
	}
	if gate != nil && s.deaf.Load() {
		<-gate
	} else if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	cands := append([]string{host}, WildcardsOf(host)...)
	for _, r := range s.apps {
		if slices.ContainsFunc(r.Hosts, func(h string) bool { return slices.Contains(cands, h) }) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *memStore) Apps(ctx context.Context, names []string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, n := range names {
		if r, ok := s.apps[n]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *memStore) Changes(ctx context.Context, after int64, limit int) ([]Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.changes) > 0 && after > 0 && s.changes[0].Version > after+1 {
		return nil, ErrChangesLost
	}
	var out []Change
	for _, c := range s.changes {
		if c.Version > after && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *memStore) Version(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, nil
}

// val is what the tests compose: the app's name and config version.
type val struct {
	name    string
	version int64
}

// ledger counts composes and releases, to prove every composed app is
// released exactly once.
type ledger struct {
	mu       sync.Mutex
	live     map[*val]bool
	composed int
}

func (g *ledger) compose(r Record) (*val, error) {
	if strings.HasPrefix(r.Name, "bad") {
		return nil, errors.New("bad config")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	v := &val{name: r.Name, version: r.Version}
	g.live[v] = true
	g.composed++
	return v, nil
}

func (g *ledger) release(v *val) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.live[v] {
		panic(fmt.Sprintf("released %v twice or never composed", v))
	}
	delete(g.live, v)
}

func (g *ledger) liveCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

func newLazy(t *testing.T, st Store, o LazyOptions[*val]) (*Lazy[*val], *ledger) {
	t.Helper()
	g := &ledger{live: map[*val]bool{}}
	o.Store, o.Compose, o.Release = st, g.compose, g.release
	if o.Clock == nil {
		o.Clock = clock.NewFake(time.Unix(1000, 0))
	}
	l := NewLazy(o)
	t.Cleanup(func() {
		l.Close()
		if n := g.liveCount(); n != 0 {
			t.Errorf("%d composed apps never released", n)
			l.appsMu.Lock()
			for name, ref := range l.apps {
				t.Logf("still cached: %s: hosts %v pending %d (cache holds %d hosts)", name, ref.keys, ref.pending, l.hosts.len())
			}
			l.appsMu.Unlock()
		}
	})
	return l, g
}

func TestLazyLoadsOnceThenServesFromMemory(t *testing.T) {
	st := newMemStore()
	st.put("shop", []string{"shop.example", "*.shop.example"}, "/", "/api")
	st.put("api", []string{"api.shop.example"}, "/v2")
	l, g := newLazy(t, st, LazyOptions[*val]{})
	ctx := context.Background()
	if _, ok := l.Lookup("shop.example", "/"); ok {
		t.Fatal("Lookup loaded")
	}
	for _, c := range []struct{ host, path, want string }{
		{"SHOP.example:8080", "/api/x", "shop"},
		{"api.shop.example", "/v2/x", "api"},   // exact beats the wildcard
		{"api.shop.example", "/other", "shop"}, // the exact host's paths do not match: wildcard
		{"a.b.shop.example", "/", "shop"},
	} {
		v, err := l.Load(ctx, c.host, c.path)
		if err != nil || v.name != c.want {
			t.Errorf("Load(%s, %s) = %v, %v; want %s", c.host, c.path, v, err, c.want)
		}
	}
	q := st.queries.Load()
	for range 3 {
		if v, ok := l.Lookup("shop.example", "/api"); !ok || v.name != "shop" {
			t.Fatalf("Lookup of a cached host = %v %v", v, ok)
		}
		if _, err := l.Load(ctx, "shop.example", "/"); err != nil {
			t.Fatal(err)
		}
	}
	if st.queries.Load() != q {
		t.Error("a cached host queried the store")
	}
	if g.composed != 2 {
		t.Errorf("composed %d times, want once per app (2)", g.composed)
	}
}

func TestLazyUnknownHostsAreCachedForTheirTTL(t *testing.T) {
	st := newMemStore()
	clk := clock.NewFake(time.Unix(1000, 0))
	l, _ := newLazy(t, st, LazyOptions[*val]{UnknownTTL: 5 * time.Second, Clock: clk})
	ctx := context.Background()
	for range 10 {
		if _, err := l.Load(ctx, "nobody.example", "/"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	}
	if n := st.queries.Load(); n != 1 {
		t.Fatalf("%d queries for one unknown host within its TTL, want 1", n)
	}
	clk.Advance(5 * time.Second)
	l.Load(ctx, "nobody.example", "/")
	if n := st.queries.Load(); n != 2 {
		t.Fatalf("%d queries after the TTL, want 2", n)
	}
}

// TestLazyEvictionReleasesApps: the cache holds at most MaxApps hosts, an
// evicted host's app is released once no cached host uses it, and a scan
// of cold hosts does not evict a host in use.
func TestLazyEvictionReleasesApps(t *testing.T) {
	st := newMemStore()
	st.put("hot", []string{"hot.example", "hot2.example"})
	for i := range 100 {
		st.put(fmt.Sprint("cold", i), []string{fmt.Sprintf("cold%d.example", i)})
	}
	l, g := newLazy(t, st, LazyOptions[*val]{MaxApps: 8, Shards: 1})
	ctx := context.Background()
	l.Load(ctx, "hot.example", "/")
	l.Load(ctx, "hot2.example", "/")
	for i := range 100 {
		if _, err := l.Load(ctx, fmt.Sprintf("cold%d.example", i), "/"); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"hot.example", "hot2.example"} {
			if _, ok := l.Lookup(h, "/"); !ok {
				t.Fatalf("hot host %s was evicted by cold host %d", h, i)
			}
		}
	}
	st2 := l.Stats()
	if st2.Hosts != 8 || g.liveCount() != st2.Apps || st2.Apps != 7 {
		t.Errorf("hosts %d apps %d live %d; want 8 hosts, 7 apps (hot has two hosts), all live ones cached", st2.Hosts, st2.Apps, g.liveCount())
	}
	if g.composed != 101 {
		t.Errorf("composed %d, want 101 (hot once for both its hosts)", g.composed)
	}
}

// TestLazyShedsInsteadOfQueueing is the slow-store test: every query takes
// until the test releases it (a 500 ms store, without sleeping). A cached
// host is served at once and never reaches the loader; the loader runs at
// most Concurrency queries and MaxWaiters waiters; one more is refused at
// once; after the store recovers, cold hosts load again.
func TestLazyShedsInsteadOfQueueing(t *testing.T) {
	st := newMemStore()
	for i := range 10 {
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("app%d.example", i)})
	}
	reg := prometheus.NewRegistry()
	l, _ := newLazy(t, st, LazyOptions[*val]{Concurrency: 2, MaxWaiters: 3, Timeout: time.Minute, Metrics: NewMetrics(reg)})
	ctx := context.Background()
	if _, err := l.Load(ctx, "app0.example", "/"); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	started := make(chan string, 10)
	st.mu.Lock()
	st.gate, st.started = gate, started
	st.mu.Unlock()
	q0 := st.queries.Load()

	// Two cold hosts take both query slots...
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for _, h := range []string{"app1.example", "app2.example"} {
		wg.Go(func() { _, err := l.Load(ctx, h, "/"); errs <- err })
		<-started
	}
	// ...three more requests join the load of app1 (MaxWaiters)...
	for range 3 {
		wg.Go(func() { _, err := l.Load(ctx, "app1.example", "/"); errs <- err })
	}
	waitFor(t, func() bool { return l.Stats().Waiters == 3 })
	// ...so a fourth waiter and a third cold host are refused at once.
	if _, err := l.Load(ctx, "app1.example", "/"); !errors.Is(err, ErrBusy) {
		t.Errorf("waiter beyond max_waiters: err = %v, want ErrBusy", err)
	}
	if _, err := l.Load(ctx, "app3.example", "/"); !errors.Is(err, ErrBusy) {
		t.Errorf("cold host beyond concurrency: err = %v, want ErrBusy", err)
	}
	// The cached host is served while the loader is stuck, without it.
	for range 100 {
		if v, err := l.Load(ctx, "app0.example", "/"); err != nil || v.name != "app0" {
			t.Fatalf("cached host during saturation: %v %v", v, err)
		}
	}
	s := l.Stats()
	if s.InFlight != 2 || s.Waiters != 3 || st.maxRun.Load() != 2 {
		t.Errorf("in flight %d waiters %d store max running %d; want 2, 3, 2", s.InFlight, s.Waiters, st.maxRun.Load())
	}
	if n := st.queries.Load() - q0; n != 2 {
		t.Errorf("%d queries while saturated, want 2 (the shed and cached lookups made none)", n)
	}
	// The store recovers: everyone waiting gets an answer, cold hosts load again.
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a request admitted to the loader failed: %v", err)
		}
	}
	st.mu.Lock()
	st.started = nil
	st.mu.Unlock()
	if v, err := l.Load(ctx, "app3.example", "/"); err != nil || v.name != "app3" {
		t.Errorf("after recovery: %v %v", v, err)
	}
	if got := testutil.ToFloat64(l.o.Metrics.shedSlots) + testutil.ToFloat64(l.o.Metrics.shedWaiters); got != 2 {
		t.Errorf("levee_catalog_shed_total = %v, want 2", got)
	}
}

// TestLazyLoadDeadline: a store that does not answer within Timeout frees
// its slot and the caller gets ErrUnavailable.
func TestLazyLoadDeadline(t *testing.T) {
	st := newMemStore()
	st.put("a", []string{"a.example"})
	st.setGate(make(chan struct{})) // never opened
	l, _ := newLazy(t, st, LazyOptions[*val]{Concurrency: 1, Timeout: 20 * time.Millisecond})
	for range 2 { // the second proves the slot was freed
		if _, err := l.Load(context.Background(), "a.example", "/"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		// The caller is answered at the deadline; the slot is free once
		// the query has returned, a moment later.
		waitFor(t, func() bool { return l.Stats().InFlight == 0 })
	}
	st.setGate(nil)
	if _, err := l.Load(context.Background(), "a.example", "/"); err != nil {
		t.Fatalf("after the store answers again: %v", err)
	}
}

// TestLazyLoadDeadlineBindsADeafStore: a store that does not heed the
// load's deadline (SQLite retrying a locked WAL index for about 10 s) still
// answers its callers at the deadline; its query keeps the slot until it
// returns, so the loader stays bounded: a cold host beyond it is refused at
// once, and callers joining the late load are answered at once.
func TestLazyLoadDeadlineBindsADeafStore(t *testing.T) {
	leaktest.Check(t)
	const timeout = 50 * time.Millisecond
	st := newMemStore()
	st.put("a", []string{"a.example"})
	st.put("b", []string{"b.example"})
	gate := make(chan struct{})
	defer close(gate) // before the Lazy's cleanup joins the query
	st.setGate(gate)
	st.deaf.Store(true)
	l, _ := newLazy(t, st, LazyOptions[*val]{Concurrency: 1, MaxWaiters: 4, Timeout: timeout})
	ctx := context.Background()
	start := time.Now()
	if _, err := l.Load(ctx, "a.example", "/"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	// The margin only catches a wait that the deadline did not end.
	if took := time.Since(start); took > timeout+3*time.Second {
		t.Fatalf("the load's caller waited %v, want about the %v deadline", took, timeout)
	}
	if _, err := l.Load(ctx, "b.example", "/"); !errors.Is(err, ErrBusy) {
		t.Errorf("a cold host while the late query holds the only slot: err = %v, want ErrBusy", err)
	}
	if _, err := l.Load(ctx, "a.example", "/"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a caller joining the late load: err = %v, want ErrUnavailable at once", err)
	}
	if s := l.Stats(); s.InFlight != 1 || s.Waiters != 0 {
		t.Errorf("in flight %d, waiters %d while the store is stuck; want 1, 0", s.InFlight, s.Waiters)
	}
	st.setGate(nil)
	gate <- struct{}{} // the stuck query returns
	waitFor(t, func() bool { return l.Stats().InFlight == 0 })
	if v, err := l.Load(ctx, "b.example", "/"); err != nil || v.name != "b" {
		t.Fatalf("after the store answers again: %v %v", v, err)
	}
}

func TestLazyWatcherAppliesChanges(t *testing.T) {
	st := newMemStore()
	st.put("shop", []string{"shop.example"})
	st.put("blog", []string{"blog.example"})
	l, _ := newLazy(t, st, LazyOptions[*val]{UnknownTTL: time.Hour})
	ctx := context.Background()
	v, _ := st.Version(ctx)
	l.version.Store(v)
	l.Load(ctx, "shop.example", "/")
	l.Load(ctx, "blog.example", "/")
	l.Load(ctx, "new.example", "/") // unknown, cached as such
	q := st.queries.Load()

	st.put("shop", []string{"shop.example"}) // same routes: swapped in place
	st.put("blog", []string{"blog2.example"})
	st.put("new", []string{"new.example"})
	if n, err := l.Poll(ctx); err != nil || n != 3 {
		t.Fatalf("poll: %d %v", n, err)
	}
	if got, ok := l.Lookup("shop.example", "/"); !ok || got.version != 3 {
		t.Errorf("shop after an in-place update: %v %v, want version 3", got, ok)
	}
	if st.queries.Load() != q {
		t.Error("an in-place update reloaded the host")
	}
	if _, ok := l.Lookup("blog.example", "/"); ok {
		t.Error("blog.example still cached after blog moved away")
	}
	if got, err := l.Load(ctx, "new.example", "/"); err != nil || got.name != "new" {
		t.Errorf("new.example after its app was added: %v %v", got, err)
	}
	st.del("shop")
	l.Poll(ctx)
	if _, err := l.Load(ctx, "shop.example", "/"); !errors.Is(err, ErrNotFound) {
		t.Errorf("shop.example after delete: %v", err)
	}
}

func TestLazyWatcherFlushesWhenChangesWereLost(t *testing.T) {
	st := newMemStore()
	st.put("a", []string{"a.example"})
	l, _ := newLazy(t, st, LazyOptions[*val]{})
	ctx := context.Background()
	l.version.Store(1)
	l.Load(ctx, "a.example", "/")
	st.put("a", []string{"a.example"})
	st.put("a", []string{"a.example"})
	st.mu.Lock()
	st.changes = st.changes[2:] // change 2 pruned unread
	st.mu.Unlock()
	if _, err := l.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Lookup("a.example", "/"); ok || l.version.Load() != 3 {
		t.Errorf("after lost changes: cached %v, version %d; want flushed at 3", ok, l.version.Load())
	}
}

// TestLazyConcurrentLoadsAndChanges runs loads, lookups and changes at once
// (for the race detector) and checks that every composed app is released.
func TestLazyConcurrentLoadsAndChanges(t *testing.T) {
	st := newMemStore()
	for i := range 50 {
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("h%d.example", i), fmt.Sprintf("h%d.alias", i)})
	}
	l, _ := newLazy(t, st, LazyOptions[*val]{MaxApps: 16, Shards: 4, Concurrency: 4, MaxWaiters: 8})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 300 {
				h := fmt.Sprintf("h%d.%s", (i*7+w)%50, []string{"example", "alias"}[i%2])
				if _, err := l.Load(ctx, h, "/"); err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, ErrNotFound) {
					t.Error(err)
					return
				}
				l.Lookup(h, "/")
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			name := fmt.Sprint("app", i%50)
			if i%3 == 0 {
				st.put(name, []string{fmt.Sprintf("h%d.example", i%50)})
			} else {
				st.put(name, []string{fmt.Sprintf("h%d.example", i%50), fmt.Sprintf("h%d.alias", i%50)})
			}
			if _, err := l.Poll(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if s := l.Stats(); s.Hosts > 16 || s.InFlight != 0 || s.Waiters != 0 {
		t.Errorf("stats after the run: %+v", s)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	leaktest.WaitFor(t, leaktest.Wait, "the condition", cond)
}

func TestLazyCachedLookupAllocatesNothing(t *testing.T) {
	st := newMemStore()
	st.put("a", []string{"a.example"})
	l, _ := newLazy(t, st, LazyOptions[*val]{})
	ctx := context.Background()
	l.Load(ctx, "a.example", "/")
	if n := testing.AllocsPerRun(100, func() { l.Load(ctx, "a.example", "/x") }); n != 0 {
		t.Errorf("a cached Load allocates %v times", n)
	}
}

// TestLazyBurstOfChangesDoesNotStallLookups applies 100,000 changes to
// cached apps and stops the watcher in the middle of them (inside a
// compose): every cached host is still looked up at once, so no lock is
// held across the burst.
func TestLazyBurstOfChangesDoesNotStallLookups(t *testing.T) {
	const apps, changes = 1000, 100_000
	st := newMemStore()
	for i := range apps {
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("h%d.example", i)})
	}
	g := &ledger{live: map[*val]bool{}}
	blocked, unblock := make(chan struct{}), make(chan struct{})
	var armed, composes atomic.Int64
	l := NewLazy(LazyOptions[*val]{Store: st, MaxApps: apps, Release: g.release,
		Compose: func(r Record) (*val, error) {
			// Stop once, halfway through the watcher's composes (one per
			// cached app: it reads each app as it is now, so the burst's
			// later changes of an app cost nothing more).
			if armed.Load() == 1 && composes.Add(1) == apps/2 {
				close(blocked)
				<-unblock
			}
			return g.compose(r)
		}})
	defer l.Close()
	ctx := context.Background()
	l.version.Store(apps)
	for i := range apps {
		if _, err := l.Load(ctx, fmt.Sprintf("h%d.example", i), "/"); err != nil {
			t.Fatal(err)
		}
	}
	for k := range changes {
		i := k % apps
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("h%d.example", i)})
	}
	armed.Store(1)
	done := make(chan error, 1)
	go func() { _, err := l.Poll(ctx); done <- err }()
	<-blocked
	for i := range apps {
		if _, ok := l.Lookup(fmt.Sprintf("h%d.example", i), "/"); !ok {
			t.Fatalf("h%d.example missed while the watcher was mid-burst", i)
		}
	}
	close(unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range apps {
		v, ok := l.Lookup(fmt.Sprintf("h%d.example", i), "/")
		if want := int64(apps + changes - apps + 1 + i); !ok || v.version != want {
			t.Fatalf("h%d.example after the burst: %v %v, want version %d", i, v, ok, want)
		}
	}
}

// TestLazyLoadRate: past Rate's burst, a new load is refused at once
// (ErrBusy) without touching the store; cached hosts and joins are not
// counted; one interval later one more load starts.
func TestLazyLoadRate(t *testing.T) {
	st := newMemStore()
	for i := range 10 {
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("h%d.example", i)})
	}
	clk := clock.NewFake(time.Unix(1000, 0))
	l, _ := newLazy(t, st, LazyOptions[*val]{Clock: clk, Rate: ratelimit.Limit{Interval: 10 * time.Millisecond, Burst: 3}})
	ctx := context.Background()
	for i := range 3 {
		if _, err := l.Load(ctx, fmt.Sprintf("h%d.example", i), "/"); err != nil {
			t.Fatalf("load %d of the burst: %v", i, err)
		}
	}
	if _, err := l.Load(ctx, "h0.example", "/"); err != nil { // cached: not a load
		t.Fatalf("cached host: %v", err)
	}
	q := st.queries.Load()
	if _, err := l.Load(ctx, "h3.example", "/"); !errors.Is(err, ErrBusy) {
		t.Fatalf("load past the burst: %v, want ErrBusy", err)
	}
	if st.queries.Load() != q {
		t.Fatal("a load refused by the rate queried the store")
	}
	clk.Advance(10*time.Millisecond - time.Nanosecond)
	if _, err := l.Load(ctx, "h3.example", "/"); !errors.Is(err, ErrBusy) {
		t.Fatalf("1ns before the next load: %v, want ErrBusy", err)
	}
	clk.Advance(time.Nanosecond)
	if _, err := l.Load(ctx, "h3.example", "/"); err != nil {
		t.Fatalf("at the next interval: %v", err)
	}
}

// goroutineStore is a memStore that records which goroutine ran each
// ForHost.
type goroutineStore struct {
	*memStore
	mu  sync.Mutex
	ids map[string]int // goroutine ID → loads run on it
}

func (s *goroutineStore) ForHost(ctx context.Context, host string) ([]Record, error) {
	var buf [64]byte
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine "), " ")
	s.mu.Lock()
	s.ids[id]++
	s.mu.Unlock()
	return s.memStore.ForHost(ctx, host)
}

// TestLazyLoadsRunOnLongLivedWorkers: loads run on at most Concurrency
// goroutines, each kept for the next load (a new one per load would grow
// its stack again for SQLite's deep query), and Close ends them all.
func TestLazyLoadsRunOnLongLivedWorkers(t *testing.T) {
	leaktest.Check(t) // runs after newLazy's Close
	st := &goroutineStore{memStore: newMemStore(), ids: map[string]int{}}
	const n = 60
	for i := range n {
		st.put(fmt.Sprint("app", i), []string{fmt.Sprintf("app%d.example", i)})
	}
	l, _ := newLazy(t, st, LazyOptions[*val]{Concurrency: 2, MaxApps: 1000, Timeout: time.Minute})
	ctx := context.Background()
	for i := range n / 2 { // one at a time
		if _, err := l.Load(ctx, fmt.Sprintf("app%d.example", i), "/"); err != nil {
			t.Fatal(err)
		}
	}
	if len(st.ids) > 2 {
		t.Fatalf("%d loads one after another ran on %d goroutines, want at most Concurrency (2): %v", n/2, len(st.ids), st.ids)
	}
	var wg sync.WaitGroup
	for i := n / 2; i < n; i++ { // at once: some refused (ErrBusy), the rest on the same workers
		wg.Go(func() {
			if _, err := l.Load(ctx, fmt.Sprintf("app%d.example", i), "/"); err != nil && !errors.Is(err, ErrBusy) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(st.ids) > 2 {
		t.Errorf("loads ran on %d goroutines, want at most Concurrency (2): %v", len(st.ids), st.ids)
	}
}
