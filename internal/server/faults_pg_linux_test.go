package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog/pgstore"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/pgtest"
)

// pgCatalog starts a PostgreSQL of the test's own (it is paused), puts
// jsonl's apps in a new catalog there, and returns the server and a store
// on it for levee.
func pgCatalog(t *testing.T, jsonl string) (*pgtest.Server, *pgstore.Store) {
	t.Helper()
	srv := pgtest.Start(t)
	dsn := srv.Database(t)
	ctx := context.Background()
	w, err := pgstore.Open(dsn, pgstore.Options{Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Init(ctx); err != nil {
		t.Fatal(err)
	}
	apps, err := config.ReadImport("apps.jsonl", strings.NewReader(jsonl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, apps, time.Now()); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.Open(dsn, pgstore.Options{Conns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, st
}

// The PostgreSQL catalog frozen (SIGSTOP of the postmaster and every
// backend: connections are accepted, nothing answers) under a running
// load on a cached host: the cached host goes on being served, every
// request of it; each cold host is refused with 503 catalog-unavailable or
// catalog-busy and Retry-After by catalog.loader.timeout (+ a margin),
// never left waiting; once PostgreSQL goes on, cold hosts load.
func TestFaultCatalogPostgresStalls(t *testing.T) {
	leaktest.Check(t)
	const (
		timeout = 300 * time.Millisecond
		colds   = 12
	)
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	var jsonl strings.Builder
	jsonl.WriteString(storedApp("hot", "hot.test", be, ""))
	for i := range colds {
		jsonl.WriteString(storedApp(fmt.Sprintf("cold%d", i), fmt.Sprintf("cold%d.test", i), be, ""))
	}
	pg, st := pgCatalog(t, jsonl.String())
	p := startCatalogProxy(t, fmt.Sprintf(
		"catalog: {sqlite: unused-in-test.db, loader: {concurrency: 2, max_waiters: 4, timeout: %v, retry_after: 2s}}\n", timeout), st)
	// get answers host's request: its status, and its reason or body.
	get := func(host string) (int, string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp := p.get(host, "/")
		body := readAll(t, resp)
		took := time.Since(start)
		reason := resp.Header.Get("Levee-Reject")
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "2" {
			t.Errorf("%s: 503 %s without Retry-After: 2 (%v)", host, reason, resp.Header)
		}
		if reason == "" {
			reason = body
		}
		return resp.StatusCode, reason, took
	}
	if code, body, _ := get("hot.test"); code != http.StatusOK || body != "stored" {
		t.Fatalf("hot app before the stall: %d %q", code, body)
	}

	// The load: 4 clients on the cached host until the end.
	var stop atomic.Bool
	var hot atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if code, body, took := get("hot.test"); code != http.StatusOK || body != "stored" || took > faultMargin {
					t.Errorf("the cached host under load: %d %q after %v; want 200 stored, at once", code, body, took)
					return
				}
				hot.Add(1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	served := func(n int64) {
		t.Helper()
		from := hot.Load()
		waitFor(t, fmt.Sprintf("%d more answers on the cached host", n), func() bool { return hot.Load() >= from+n })
	}
	served(20)

	pg.Pause(t)
	served(50)
	refused := map[string]int{}
	var mu sync.Mutex
	var cold sync.WaitGroup
	for i := range colds {
		cold.Go(func() {
			host := fmt.Sprintf("cold%d.test", i)
			code, reason, took := get(host)
			if code != http.StatusServiceUnavailable || (reason != "catalog-unavailable" && reason != "catalog-busy") {
				t.Errorf("%s while PostgreSQL is stalled: %d %q; want 503 catalog-unavailable or catalog-busy", host, code, reason)
			}
			if took > timeout+faultMargin {
				t.Errorf("%s answered after %v; want the %v load deadline (+ at most %v)", host, took, timeout, faultMargin)
			}
			mu.Lock()
			refused[reason]++
			mu.Unlock()
		})
	}
	cold.Wait()
	served(50)
	t.Logf("PostgreSQL stalled: %d cold hosts refused %v; the cached host served throughout", colds, refused)

	pg.Resume()
	// The store backs off an unreachable database; cold hosts load once
	// it tries again. Until then each is refused at once, never held.
	for i := range colds {
		host := fmt.Sprintf("cold%d.test", i)
		waitFor(t, host+" served once PostgreSQL goes on", func() bool {
			code, reason, took := get(host)
			if code != http.StatusOK && (code != http.StatusServiceUnavailable || took > timeout+faultMargin) {
				t.Fatalf("%s after the stall: %d %q after %v; want 200, or 503 by the load deadline", host, code, reason, took)
			}
			return code == http.StatusOK && reason == "stored"
		})
	}
	served(20)
	stop.Store(true)
	wg.Wait()
	t.Logf("the cached host answered %d requests, all 200", hot.Load())
}
