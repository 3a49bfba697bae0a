package sqlitestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// The catalog benchmarks build a catalog file of benchApps() apps (10,000
// unless LEVEE_BENCH_APPS says more: bench/catalog.sh sets 1000000), once
// per test binary, in a temporary directory.
func benchApps() int {
	if n, err := strconv.Atoi(os.Getenv("LEVEE_BENCH_APPS")); err == nil && n > 0 {
		return n
	}
	return 10_000
}

var (
	benchOnce sync.Once
	benchPath string
	benchDir  string
)

// benchFile makes (once) a catalog of n apps, app<i> claiming h<i>.bench:
// written with plain inserts in one transaction, as an import of valid
// apps would leave it, without parsing a million configs.
func benchFile(b *testing.B, n int) string {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "levee-catalog-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchDir, benchPath = dir, filepath.Join(dir, "catalog.db")
		start := time.Now()
		w, err := Create(benchPath)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		tx, err := w.db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		appSt, _ := tx.Prepare(`INSERT INTO apps (name, config, version) VALUES (?, ?, 1)`)
		routeSt, _ := tx.Prepare(`INSERT INTO routes (host, path, app) VALUES (?, '/', ?)`)
		for i := range n {
			name, host := "app"+strconv.Itoa(i), "h"+strconv.Itoa(i)+".bench"
			cfg := fmt.Sprintf(`{"backends":["10.%d.%d.%d:8080"],"hosts":[%q],"limits":{"concurrency":64,"rate":"100/s"}}`,
				i>>16&255, i>>8&255, i&255, host)
			if _, err := appSt.Exec(name, cfg); err != nil {
				b.Fatal(err)
			}
			if _, err := routeSt.Exec(host, name); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "catalog bench: %d apps written in %s\n", n, time.Since(start).Round(time.Millisecond))
	})
	return benchPath
}

// TestMain removes the benchmarks' catalog file.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

type benchVal struct {
	name string
	cfg  []byte
}

func benchLazy(b *testing.B, st catalog.Store, maxApps int) *catalog.Lazy[*benchVal] {
	l := catalog.NewLazy(catalog.LazyOptions[*benchVal]{
		Store:       st,
		Compose:     func(r catalog.Record) (*benchVal, error) { return &benchVal{name: r.Name, cfg: r.Config}, nil },
		MaxApps:     maxApps,
		Concurrency: 8, MaxWaiters: 1024, Timeout: 10 * time.Second,
	})
	b.Cleanup(l.Close)
	return l
}

// benchCached is how many of the file's apps BenchmarkCatalogCachedLookup
// caches: min(apps, LEVEE_BENCH_CACHED or 100,000), loaded 8 at a time.
func benchCached(apps int) int {
	if n, err := strconv.Atoi(os.Getenv("LEVEE_BENCH_CACHED")); err == nil && n > 0 {
		return min(n, apps)
	}
	return min(100_000, apps)
}

// pacedStore releases the changes already written to the file at rate per
// second from start, as if they were being written now: the benchmark
// measures what levee does with 1,000 changes a second (poll, read the
// changed apps, compose, swap), not the writer, which is another process
// (levee catalog import) in production.
type pacedStore struct {
	*Store
	mu    sync.Mutex
	v0    int64
	start time.Time
	rate  float64 // 0: every change at once
}

func (p *pacedStore) pace(v0 int64, rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v0, p.start, p.rate = v0, time.Now(), rate
}

func (p *pacedStore) Changes(ctx context.Context, after int64, limit int) ([]catalog.Change, error) {
	p.mu.Lock()
	v0, start, rate := p.v0, p.start, p.rate
	p.mu.Unlock()
	if rate > 0 {
		due := v0 + int64(time.Since(start).Seconds()*rate)
		if due <= after {
			return nil, nil
		}
		limit = min(limit, int(due-after))
	}
	return p.Store.Changes(ctx, after, limit)
}

// BenchmarkCatalogCachedLookup looks up cached apps from all Ps at once,
// in a file of benchApps() apps of which benchCached() are cached
// (max_apps = that). updates=1000 applies 1,000 changes a second to
// random cached apps meanwhile (each a new config: read, composed and
// swapped in by the watcher, polling every 10 ms).
func BenchmarkCatalogCachedLookup(b *testing.B) {
	apps := benchApps()
	n := benchCached(apps)
	path := benchFile(b, apps)
	raw, err := Open(path, Options{Conns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	st := &pacedStore{Store: raw}
	st.pace(0, 1) // nothing new until a run paces it
	l := catalog.NewLazy(catalog.LazyOptions[*benchVal]{
		Store:       st,
		Compose:     func(r catalog.Record) (*benchVal, error) { return &benchVal{name: r.Name, cfg: r.Config}, nil },
		MaxApps:     n,
		Concurrency: 8, MaxWaiters: 1024, Timeout: 10 * time.Second,
		Watch: 10 * time.Millisecond,
	})
	b.Cleanup(l.Close)
	ctx := context.Background()
	hosts := make([]string, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var warm sync.WaitGroup
	for w := range 8 {
		warm.Go(func() {
			for i := w; i < n; i += 8 {
				hosts[i] = "h" + strconv.Itoa(i*(apps/n)) + ".bench"
				if _, err := l.Load(ctx, hosts[i], "/"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	warm.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perApp := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	v0, err := raw.Version(ctx)
	if err != nil {
		b.Fatal(err)
	}
	st.pace(v0, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watcher sync.WaitGroup
	watcher.Go(func() { l.Run(watchCtx) })
	b.Cleanup(func() { stopWatch(); watcher.Wait() })
	writeChanges(b, path, apps, n, 30_000)

	for _, rate := range []int{0, 1000} {
		b.Run(fmt.Sprintf("apps=%d/cached=%d/updates=%d", apps, n, rate), func(b *testing.B) {
			start := l.Stats().Version
			st.pace(start, float64(rate))
			if rate == 0 {
				st.pace(start, 1e-9) // nothing due during the run
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if _, ok := l.Lookup(hosts[r.IntN(n)], "/x"); !ok {
						b.Error("a cached host missed")
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(perApp, "heapB/cached-app")
			b.ReportMetric(float64(l.Stats().Version-start)/b.Elapsed().Seconds(), "applied/s")
		})
	}
}

// writeChanges writes k changed configs of random cached apps to the
// file (the apps cached are every apps/n-th), for pacedStore to release.
func writeChanges(b *testing.B, path string, apps, n, k int) {
	w, err := Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	r := rand.New(rand.NewPCG(2, 3))
	batch := make([]config.AppSource, k)
	for j := range batch {
		i := r.IntN(n) * (apps / n)
		host := "h" + strconv.Itoa(i) + ".bench"
		batch[j] = config.AppSource{Name: "app" + strconv.Itoa(i), App: &config.App{Hosts: []string{host}, Paths: []string{"/"}},
			Config: fmt.Appendf(nil, `{"backends":["10.0.0.1:8080"],"hosts":[%q],"limits":{"concurrency":%d}}`, host, 1+j)}
	}
	if _, err := w.Put(context.Background(), batch, time.Now()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCatalogColdLoad loads hosts never loaded before, one at a
// time: the latency of a cold app (two indexed queries in one read
// transaction, plus composing a trivial value).
func BenchmarkCatalogColdLoad(b *testing.B) {
	n := benchApps()
	st, err := Open(benchFile(b, n), Options{Conns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	b.Run(fmt.Sprintf("apps=%d", n), func(b *testing.B) {
		l := benchLazy(b, st, 1000) // a small cache: every load evicts
		ctx := context.Background()
		r := rand.New(rand.NewPCG(4, 5))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := l.Load(ctx, "h"+strconv.Itoa(r.IntN(n))+".bench", "/"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCatalogHotWithColdStream times each lookup of a hot set of
// cached hosts (1,000) and reports its p50 and p99, alone and with a
// stream of cold hosts beside it: 8 goroutines loading hosts never seen
// (each a query of the file, or a catalog-busy refusal when the loader's
// 4 slots are taken). The hot lookups must not notice the stream.
func BenchmarkCatalogHotWithColdStream(b *testing.B) {
	apps := benchApps()
	st, err := Open(benchFile(b, apps), Options{Conns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	const hot = 1000
	for _, cold := range []bool{false, true} {
		b.Run(fmt.Sprintf("apps=%d/cold-stream=%v", apps, cold), func(b *testing.B) {
			l := catalog.NewLazy(catalog.LazyOptions[*benchVal]{
				Store:       st,
				Compose:     func(r catalog.Record) (*benchVal, error) { return &benchVal{name: r.Name, cfg: r.Config}, nil },
				MaxApps:     10_000,
				Concurrency: 4, MaxWaiters: 16, Timeout: 10 * time.Second,
			})
			defer l.Close()
			ctx := context.Background()
			hosts := make([]string, hot)
			for i := range hosts {
				hosts[i] = "h" + strconv.Itoa(i) + ".bench"
				if _, err := l.Load(ctx, hosts[i], "/"); err != nil {
					b.Fatal(err)
				}
			}
			stop := make(chan struct{})
			var streams sync.WaitGroup
			var loaded, shed atomic.Int64
			if cold {
				for w := range 8 {
					streams.Go(func() {
						r := rand.New(rand.NewPCG(uint64(w), 9))
						for {
							select {
							case <-stop:
								return
							default:
							}
							_, err := l.Load(ctx, "h"+strconv.Itoa(hot+r.IntN(apps-hot))+".bench", "/")
							if err == nil {
								loaded.Add(1)
							} else {
								shed.Add(1)
								time.Sleep(time.Millisecond) // a refused client backs off
							}
						}
					})
				}
			}
			lat := make([]time.Duration, 0, min(b.N, 1_000_000))
			r := rand.New(rand.NewPCG(7, 8))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N { // not b.Loop: lat is sized by b.N
				h := hosts[r.IntN(hot)]
				t0 := time.Now()
				_, ok := l.Lookup(h, "/")
				d := time.Since(t0)
				if !ok {
					b.Fatal("a hot host missed")
				}
				if len(lat) < cap(lat) {
					lat = append(lat, d)
				}
			}
			b.StopTimer()
			close(stop)
			streams.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
			if cold {
				b.ReportMetric(float64(loaded.Load()+shed.Load())/b.Elapsed().Seconds(), "cold/s")
				b.ReportMetric(float64(shed.Load())/float64(max(1, loaded.Load()+shed.Load())), "cold-shed-ratio")
			}
		})
	}
}
