package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/urlpath"
)

// Errors of Lazy.Load.
var (
	// ErrNotFound: no app claims the host and path.
	ErrNotFound = errors.New("catalog: no app for this host and path")
	// ErrBusy: the host is not in memory and the loader is saturated; the
	// caller was refused at once rather than queued.
	ErrBusy = errors.New("catalog: loader busy")
	// ErrUnavailable: loading the host failed or missed its deadline.
	ErrUnavailable = errors.New("catalog: store unavailable")
)

// LazyOptions configure a Lazy catalog. Zero values get the defaults noted.
type LazyOptions[V any] struct {
	Store Store
	// Compose turns a stored app into its value (a composed route). It is
	// called without any Lazy lock held, by a loader or the watcher; an
	// error skips the app (logged and counted).
	Compose func(Record) (V, error)
	// Release is told that a value Compose returned is no longer used by
	// the cache (evicted, replaced or deleted). Requests that already
	// looked it up may still be using it. Called without any Lazy lock.
	Release func(V)
	// MaxApps bounds the cached hosts (10000); MaxUnknown the hosts cached
	// as unknown (100000) for UnknownTTL (5s; 0: not cached).
	MaxApps, MaxUnknown int
	UnknownTTL          time.Duration
	// Concurrency is the most loads at once (8); MaxWaiters the most callers
	// waiting for a load already running (256); Timeout each load's deadline (500ms).
	Concurrency, MaxWaiters int
	Timeout                 time.Duration
	// Rate bounds the loads started per interval (zero: no bound): a wave
	// of cold hosts then costs at most that much CPU, so the cached hosts'
	// requests keep theirs. A cold host over it is refused at once (ErrBusy).
	Rate ratelimit.Limit
	// Watch is how often Run polls the store for changes (1s).
	Watch time.Duration
	// Shards splits the caches (64, fewer for a cache under 1024 apps).
	Shards  int
	Clock   clock.Clock
	Logger  *slog.Logger
	Metrics *Metrics // nil: not measured
}

// Lazy is a catalog loaded from a Store on demand: hot hosts stay in a
// bounded, sharded cache; a miss is loaded by a bounded loader that sheds
// instead of queueing. A cached host never touches the loader. It is safe
// for concurrent use; Run applies the store's changes.
type Lazy[V any] struct {
	o       LazyOptions[V]
	hosts   *sieve[hostEntry[V]]
	unknown *sieve[struct{}]

	// loader state: only misses take mu.
	mu       sync.Mutex
	calls    map[string]*loadCall[V]
	inflight int
	waiters  int
	rate     *ratelimit.Bucket // nil: loads are not rate limited

	// apps are the composed apps the cached hosts use, by name.
	appsMu sync.Mutex
	apps   map[string]*appRef[V]

	bg    context.Context
	stop  context.CancelFunc
	loads sync.WaitGroup // the loader's workers
	// jobs hands a load to an idle worker. Workers live until Close, at
	// most Concurrency of them (workers counts them, under mu), so a load
	// runs on a stack already grown by the store's query instead of
	// growing a new goroutine's, copy by copy, each time: SQLite's query
	// is deep, and that growth was 5% of a cold load's CPU.
	jobs    chan loadJob[V]
	workers int

	version atomic.Int64 // of the last change applied by the watcher
	certs   atomic.Pointer[func(hosts []string)]
}

var _ Catalog[int] = (*Lazy[int])(nil)

// hostEntry is what one host routes to: routes in match order (exact host
// first, longest path first; then wildcards, longest suffix first), the
// first kept inline, so the common host of one route costs no pointer
// chase more. Cache nodes hold it by value for the same reason.
type hostEntry[V any] struct {
	first hostRoute[V]
	rest  []hostRoute[V]
	apps  []*appRef[V] // distinct apps of the routes
}

type hostRoute[V any] struct {
	prefix string
	app    *appRef[V]
}

// appRef is one composed app shared by the cached hosts that route to it.
type appRef[V any] struct {
	val atomic.Pointer[V] // swapped in place when the app changes and keeps its routes
	rec Record            // guarded by Lazy.appsMu, like the fields below
	// keys are the cached hosts using the app; pending the loads that hold
	// it but have not inserted yet. It is released when both are empty.
	keys    []string
	pending int
}

// loadJob is one load: its host key, its call, and the cache shards'
// generations read when it started (run).
type loadJob[V any] struct {
	key       string
	c         *loadCall[V]
	gen, ugen uint64
}

type loadCall[V any] struct {
	done chan struct{}
	// ctx is the load's deadline (Timeout, from its start); it is cancelled
	// only after done is closed, so a waiter that sees it end first knows
	// the load is late.
	ctx    context.Context
	cancel context.CancelFunc
	entry  *hostEntry[V] // nil: unknown host
	err    error
}

// NewLazy returns a Lazy catalog; call Run to follow the store's changes
// and Close to stop its goroutines.
func NewLazy[V any](o LazyOptions[V]) *Lazy[V] {
	o.MaxApps = cmp.Or(o.MaxApps, 10_000)
	o.MaxUnknown = cmp.Or(o.MaxUnknown, 100_000)
	o.Concurrency = cmp.Or(o.Concurrency, 8)
	o.MaxWaiters = max(o.MaxWaiters, 0)
	o.Timeout = cmp.Or(o.Timeout, 500*time.Millisecond)
	o.Watch = cmp.Or(o.Watch, time.Second)
	// Eviction works within a shard, and a shard keeps at least its newest
	// host: at most one host per shard beyond MaxApps. Few shards for a
	// small cache keep that overshoot within 1/16 of it.
	o.Shards = cmp.Or(o.Shards, min(64, max(1, o.MaxApps/16)))
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Release == nil {
		o.Release = func(V) {}
	}
	l := &Lazy[V]{o: o, hosts: newSieve[hostEntry[V]](o.MaxApps, o.Shards),
		unknown: newSieve[struct{}](max(o.MaxUnknown, 1), o.Shards),
		calls:   map[string]*loadCall[V]{}, apps: map[string]*appRef[V]{}, jobs: make(chan loadJob[V])}
	l.bg, l.stop = context.WithCancel(context.Background())
	if o.Rate.Interval > 0 {
		b, err := ratelimit.NewBucket(o.Rate, o.Clock.Now())
		if err != nil {
			panic("catalog: invalid load rate: " + err.Error()) // validated config: a broken invariant
		}
		l.rate = b
	}
	if o.Metrics != nil {
		o.Metrics.bind(l.stats)
	}
	return l
}

// Lookup finds host and path among the cached hosts only; it never loads.
func (l *Lazy[V]) Lookup(host, path string) (V, bool) {
	var zero V
	key := canonicalHost(host)
	sh := l.hosts.shard(key)
	n := sh.get(key)
	if n == nil {
		return zero, false
	}
	sh.hits.Add(1)
	return n.val.match(path)
}

// Load finds host and path, loading the host from the store when it is not
// cached. It returns ErrNotFound, ErrBusy (at once, when the loader is
// saturated), ErrUnavailable, or ctx's error when ctx ends first.
func (l *Lazy[V]) Load(ctx context.Context, host, path string) (V, error) {
	var zero V
	key := canonicalHost(host)
	sh := l.hosts.shard(key)
	if n := sh.get(key); n != nil {
		sh.hits.Add(1)
		if v, ok := n.val.match(path); ok {
			return v, nil
		}
		return zero, ErrNotFound
	}
	if l.knownUnknown(key) {
		return zero, ErrNotFound
	}
	e, err := l.load(ctx, key)
	if err != nil {
		return zero, err
	}
	if v, ok := e.match(path); ok {
		return v, nil
	}
	return zero, ErrNotFound
}

// LoadHost is Load for a host under any path: the first app claiming host
// (by the longest path prefix first, as Load orders them), for what is the
// host's rather than a request's (its TLS certificate, chosen by SNI).
func (l *Lazy[V]) LoadHost(ctx context.Context, host string) (V, error) {
	var zero V
	key := canonicalHost(host)
	sh := l.hosts.shard(key)
	var e *hostEntry[V]
	if n := sh.get(key); n != nil {
		sh.hits.Add(1)
		e = &n.val
	} else {
		if l.knownUnknown(key) {
			return zero, ErrNotFound
		}
		loaded, err := l.load(ctx, key)
		if err != nil {
			return zero, err
		}
		e = loaded
	}
	if e == nil || e.first.app == nil {
		return zero, ErrNotFound
	}
	return *e.first.app.val.Load(), nil
}

func (e *hostEntry[V]) match(path string) (V, bool) {
	if e != nil && e.first.app != nil {
		if urlpath.HasPrefix(path, e.first.prefix) {
			return *e.first.app.val.Load(), true
		}
		for _, r := range e.rest {
			if urlpath.HasPrefix(path, r.prefix) {
				return *r.app.val.Load(), true
			}
		}
	}
	var zero V
	return zero, false
}

func (l *Lazy[V]) knownUnknown(key string) bool {
	if l.o.UnknownTTL <= 0 {
		return false
	}
	sh := l.unknown.shard(key)
	n := sh.get(key)
	if n == nil || l.o.Clock.Now().UnixNano() >= n.expires {
		return false
	}
	sh.hits.Add(1)
	return true
}

// load joins the load of key in flight or starts one, refusing at once
// when the loader is saturated.
func (l *Lazy[V]) load(ctx context.Context, key string) (*hostEntry[V], error) {
	key = strings.Clone(key) // kept in the cache; the caller's may be a view of a reused buffer
	m := l.o.Metrics
	l.mu.Lock()
	c := l.calls[key]
	switch {
	case c != nil && l.waiters >= l.o.MaxWaiters:
		l.mu.Unlock()
		m.shed("waiters")
		return nil, ErrBusy
	case c != nil:
		l.waiters++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.waiters--
			l.mu.Unlock()
		}()
	case l.inflight >= l.o.Concurrency:
		l.mu.Unlock()
		m.shed("concurrency")
		return nil, ErrBusy
	case l.rate != nil && !l.rate.Take(l.o.Clock.Now(), 1, 0).Allowed:
		l.mu.Unlock()
		m.shed("rate")
		return nil, ErrBusy
	default:
		l.inflight++
		c = &loadCall[V]{done: make(chan struct{})}
		c.ctx, c.cancel = context.WithTimeout(l.bg, l.o.Timeout)
		l.calls[key] = c
		// Read the generations now: an invalidation during the query
		// means what it read may be stale, and it is then not cached.
		gen, ugen := l.hosts.shard(key).generation(), l.unknown.shard(key).generation()
		l.mu.Unlock()
		m.miss()
		l.start(loadJob[V]{key: key, c: c, gen: gen, ugen: ugen})
	}
	// The load's deadline ends the wait even when the store does not heed
	// it (SQLite retrying a locked WAL index does not): the query keeps its
	// slot until it returns, and the callers get their answer in time.
	select {
	case <-c.done:
		return c.entry, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		select {
		case <-c.done: // finished as its deadline passed
			return c.entry, c.err
		default:
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, key, c.ctx.Err())
	}
}

// start hands j to an idle worker, or to a new one while there are fewer
// than Concurrency, or else waits for a worker: one is finishing its load
// (at most Concurrency loads are in flight, j among them). After Close, j
// runs here and fails at once.
func (l *Lazy[V]) start(j loadJob[V]) {
	select {
	case l.jobs <- j:
		return
	default:
	}
	l.mu.Lock()
	spawn := l.workers < l.o.Concurrency
	if spawn {
		l.workers++
	}
	l.mu.Unlock()
	if spawn {
		l.loads.Go(func() { l.work(j) })
		return
	}
	select {
	case l.jobs <- j:
	case <-l.bg.Done():
		l.run(j)
	}
}

// work runs j, then each load handed to it, until Close.
func (l *Lazy[V]) work(j loadJob[V]) {
	for {
		l.run(j)
		select {
		case j = <-l.jobs:
		case <-l.bg.Done():
			return
		}
	}
}

// run is one load, owned by the Lazy (it outlives the request that
// started it, so the requests that joined it still get its answer).
func (l *Lazy[V]) run(j loadJob[V]) {
	key, c, gen, ugen := j.key, j.c, j.gen, j.ugen
	defer c.cancel() // after done is closed (deferred calls run last first)
	defer func() {
		l.mu.Lock()
		delete(l.calls, key)
		l.inflight--
		l.mu.Unlock()
		close(c.done)
	}()
	start := l.o.Clock.Now()
	recs, err := l.o.Store.ForHost(c.ctx, key)
	l.o.Metrics.loaded(l.o.Clock.Now().Sub(start), err)
	if err != nil {
		c.err = fmt.Errorf("%w: %s: %w", ErrUnavailable, key, err)
		return
	}
	c.entry = l.build(key, recs)
	if c.entry == nil {
		if l.o.UnknownTTL > 0 && l.o.MaxUnknown > 0 {
			l.unknown.shard(key).put(key, struct{}{}, l.o.Clock.Now().Add(l.o.UnknownTTL).UnixNano(), ugen)
		}
		return
	}
	// The entry's apps count key as a user before it is visible: whoever
	// removes it from the cache, at any time after, finds key to remove.
	l.register(key, c.entry)
	ok, removed := l.hosts.shard(key).put(key, *c.entry, 0, gen)
	if !ok {
		removed = append(removed, &sieveNode[hostEntry[V]]{key: key, val: *c.entry})
	}
	l.o.Metrics.evicted(len(removed))
	l.release(removed)
}

// build composes the entry of key from the records claiming it; nil when
// none of them routes it.
func (l *Lazy[V]) build(key string, recs []Record) *hostEntry[V] {
	type claim struct {
		rank   int // 0: exact host; else the wildcard's length (longer wins)
		prefix string
		app    *appRef[V]
	}
	var claims []claim
	e := &hostEntry[V]{}
	for _, r := range recs {
		ref := l.acquire(r)
		if ref == nil {
			continue
		}
		e.apps = append(e.apps, ref)
		for _, h := range r.Hosts {
			h = strings.ToLower(h)
			rank := 0
			switch {
			case h == key:
			case strings.HasPrefix(h, "*.") && strings.HasSuffix(key, h[1:]):
				rank = len(key) - len(h) + 1 // fewer labels below the wildcard: more specific
			default:
				continue
			}
			for _, p := range r.Paths {
				claims = append(claims, claim{rank: rank, prefix: p, app: ref})
			}
		}
	}
	if len(claims) == 0 {
		if len(e.apps) > 0 {
			l.register(key, e)
			l.release([]*sieveNode[hostEntry[V]]{{key: key, val: *e}})
		}
		return nil
	}
	slices.SortStableFunc(claims, func(a, b claim) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return len(b.prefix) - len(a.prefix)
	})
	for i, c := range claims {
		if c.prefix == "/" {
			c.prefix = "/" // one string for every app's "/": its byte stays in cache
		}
		if i == 0 {
			e.first = hostRoute[V]{prefix: c.prefix, app: c.app}
		} else {
			e.rest = append(e.rest, hostRoute[V]{prefix: c.prefix, app: c.app})
		}
	}
	return e
}

// acquire returns the composed app of r, composing it if it is not cached
// or is older than r, and marks it pending until register.
func (l *Lazy[V]) acquire(r Record) *appRef[V] {
	l.appsMu.Lock()
	if ref := l.apps[r.Name]; ref != nil && ref.rec.Version >= r.Version {
		ref.pending++
		l.appsMu.Unlock()
		return ref
	}
	l.appsMu.Unlock()
	v, err := l.o.Compose(r)
	if err != nil {
		l.o.Logger.Warn("catalog: app skipped", "app", r.Name, "err", err)
		l.o.Metrics.composeFailed()
		return nil
	}
	l.appsMu.Lock()
	ref := l.apps[r.Name]
	var drop *V
	switch {
	case ref == nil:
		ref = &appRef[V]{rec: r}
		ref.val.Store(&v)
		l.apps[r.Name] = ref
	case ref.rec.Version >= r.Version: // composed meanwhile by another load
		drop = &v
	default: // newer than the cached one: the watcher will re-route if its hosts moved
		drop = ref.val.Swap(&v)
		ref.rec = r
	}
	ref.pending++
	l.appsMu.Unlock()
	if drop != nil {
		l.o.Release(*drop)
	}
	return ref
}

// register turns a load's pending holds on e's apps into uses by key.
func (l *Lazy[V]) register(key string, e *hostEntry[V]) {
	l.appsMu.Lock()
	defer l.appsMu.Unlock()
	for _, ref := range e.apps {
		ref.pending--
		ref.keys = append(ref.keys, key)
	}
}

// dropKeyLocked records that key no longer uses e's apps.
func (l *Lazy[V]) dropKeyLocked(key string, e *hostEntry[V], free []V) []V {
	for _, ref := range e.apps {
		if i := slices.Index(ref.keys, key); i >= 0 {
			ref.keys = slices.Delete(ref.keys, i, i+1)
		}
		free = l.unusedLocked(ref, free)
	}
	return free
}

func (l *Lazy[V]) unusedLocked(ref *appRef[V], free []V) []V {
	if len(ref.keys) > 0 || ref.pending > 0 || l.apps[ref.rec.Name] != ref {
		return free
	}
	delete(l.apps, ref.rec.Name)
	return append(free, *ref.val.Load())
}

// Close stops the loads in flight (their callers get ErrUnavailable) and
// waits for them, then releases every cached app.
func (l *Lazy[V]) Close() {
	l.stop()
	l.loads.Wait()
	l.flush()
}

// LazyStats are a Lazy catalog's gauges.
type LazyStats struct {
	Hosts, Unknown, Apps int
	InFlight, Waiters    int
	Hits, UnknownHits    uint64
	Version              int64 // of the last change applied
}

func (l *Lazy[V]) stats() LazyStats {
	st := LazyStats{Hosts: l.hosts.len(), Unknown: l.unknown.len(), Hits: l.hosts.hits(),
		UnknownHits: l.unknown.hits(), Version: l.version.Load()}
	l.mu.Lock()
	st.InFlight, st.Waiters = l.inflight, l.waiters
	l.mu.Unlock()
	l.appsMu.Lock()
	st.Apps = len(l.apps)
	l.appsMu.Unlock()
	return st
}

// Stats returns the catalog's gauges now.
func (l *Lazy[V]) Stats() LazyStats { return l.stats() }

// Each calls fn with every composed app in the cache, for a config reload
// to compose them again (see Refresh).
func (l *Lazy[V]) Each(fn func(Record)) {
	l.appsMu.Lock()
	recs := make([]Record, 0, len(l.apps))
	for _, ref := range l.apps {
		recs = append(recs, ref.rec)
	}
	l.appsMu.Unlock()
	for _, r := range recs {
		fn(r)
	}
}

// OnCertificates sets fn to be told, by the watcher, the hosts of every
// certificate change it reads (CertificateApp), in the order written. fn
// must not block: it holds up the watcher. Set it before Run.
func (l *Lazy[V]) OnCertificates(fn func(hosts []string)) { l.certs.Store(&fn) }

// Refresh composes every cached app again (after a config reload) and
// swaps the new values in; requests in flight finish on the old ones.
func (l *Lazy[V]) Refresh() {
	l.Each(func(r Record) { l.update(r, true) })
}
