package sqlitestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
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

// BenchmarkCatalogCachedLookup looks up cached apps from all Ps at once:
// every app of the file is cached (max_apps = apps). updates=1000 applies
// 1,000 in-place changes per second to random cached apps meanwhile, as
// the watcher does (compose + swap, under the shard and app locks).
func BenchmarkCatalogCachedLookup(b *testing.B) {
	n := benchApps()
	st, err := Open(benchFile(b, n), Options{Conns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	l := benchLazy(b, st, n)
	ctx := context.Background()
	hosts := make([]string, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		hosts[i] = "h" + strconv.Itoa(i) + ".bench"
		if _, err := l.Load(ctx, hosts[i], "/"); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perApp := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	for _, rate := range []int{0, 1000} {
		b.Run(fmt.Sprintf("apps=%d/updates=%d", n, rate), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var applied atomic.Int64
			if rate > 0 {
				wg.Go(func() { updateLoop(b, l, n, rate, stop, &applied) })
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
			close(stop)
			wg.Wait()
			b.ReportMetric(perApp, "heapB/cached-app")
			if rate > 0 {
				b.ReportMetric(float64(applied.Load())/b.Elapsed().Seconds(), "writes/s")
				b.ReportMetric(float64(l.Stats().Version), "version")
			}
		})
	}
}

// updateLoop writes rate changed apps per second to the catalog file, in
// a transaction every 10 ms, until stop closes; the Lazy's watcher (Run,
// polling every 10 ms) applies them in place.
func updateLoop(b *testing.B, l *catalog.Lazy[*benchVal], n, rate int, stop <-chan struct{}, applied *atomic.Int64) {
	w, err := Create(benchPath)
	if err != nil {
		b.Error(err)
		return
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var watcher sync.WaitGroup
	watcher.Go(func() { l.Run(ctx) })
	defer func() { cancel(); watcher.Wait() }()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	r := rand.New(rand.NewPCG(2, 3))
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		apps := make([]config.AppSource, rate/100)
		for j := range apps {
			i := r.IntN(n)
			host := "h" + strconv.Itoa(i) + ".bench"
			apps[j] = config.AppSource{Name: "app" + strconv.Itoa(i), App: &config.App{Hosts: []string{host}, Paths: []string{"/"}},
				Config: fmt.Appendf(nil, `{"backends":["10.0.0.1:8080"],"hosts":[%q],"limits":{"concurrency":%d}}`, host, 1+k%1000)}
		}
		if _, err := w.Put(ctx, apps, time.Now()); err != nil {
			b.Error(err)
			return
		}
		applied.Add(int64(len(apps)))
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
