package server

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// lockWALIndex stalls every reader of the SQLite file at path, in WAL mode,
// as another process recovering its WAL index does: it holds, exclusively,
// the locks of the -shm file that such a process holds (SQLite's
// walIndexRecover takes all but the writer's: checkpoint, recover and the
// five read marks). A reader then retries for about 10 s without looking at
// its context. A writer's BEGIN EXCLUSIVE would not do: in WAL mode readers
// go on, and readers that are connected hold a shared lock on the file, so
// no one gets an exclusive one.
//
// The lock is an open file description lock (Linux): it conflicts with
// SQLite's POSIX locks even in this process, where the levee under test
// runs. release undoes it; it also runs when the test ends.
func lockWALIndex(t *testing.T, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path+"-shm", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the catalog's WAL index: %v", err)
	}
	const walLocks = 120 // offset of the locks in the -shm file; 8 of them, the writer's first
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: walLocks + 1, Len: 7}
	waitFor(t, "the WAL index locks (a read in progress holds one)", func() bool {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Fatalf("lock the WAL index: %v", err)
		}
		return err == nil
	})
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			unlock := unix.Flock_t{Type: unix.F_UNLCK, Start: lk.Start, Len: lk.Len}
			unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unlock)
			f.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// The SQLite catalog's file stalled under a running levee: cached hosts go
// on being served; a cold host is refused with 503 catalog-unavailable (and
// Retry-After) at catalog.loader.timeout, though the query goes on; those
// queries hold the loader's slots, so further cold hosts are refused at
// once (catalog-busy): the loader never queues. Once the file is free
// again, cold hosts load. (TestCatalogBusyAnswers503AtOnce is a slow store
// that heeds its deadline.)
func TestFaultCatalogStoreStalls(t *testing.T) {
	leaktest.Check(t)
	const timeout = 300 * time.Millisecond
	var inflight, peak atomic.Int64
	be := namedBackend(t, "stored", &inflight, &peak)
	var jsonl strings.Builder
	for _, name := range []string{"hot", "cold1", "cold2", "cold3"} {
		jsonl.WriteString(storedApp(name, name+".test", be, ""))
	}
	path := filepath.Join(t.TempDir(), "catalog.db")
	_, st := catalogFileAt(t, path, jsonl.String())
	p := startCatalogProxy(t, fmt.Sprintf(
		"catalog: {sqlite: unused-in-test.db, loader: {concurrency: 2, max_waiters: 4, timeout: %v, retry_after: 2s}}\n", timeout), st)
	get := func(host string) (int, string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp := p.get(host, "/")
		body := readAll(t, resp)
		reason := resp.Header.Get("Levee-Reject")
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "2" {
			t.Errorf("%s: 503 %s without Retry-After: 2 (%v)", host, reason, resp.Header)
		}
		if reason == "" {
			reason = body
		}
		return resp.StatusCode, reason, time.Since(start)
	}
	if code, body, _ := get("hot.test"); code != http.StatusOK {
		t.Fatalf("hot app before the stall: %d %q", code, body)
	}

	release := lockWALIndex(t, path)
	for range 20 {
		if code, body, _ := get("hot.test"); code != http.StatusOK || body != "stored" {
			t.Fatalf("cached app while the file is stalled: %d %q", code, body)
		}
	}
	// Two cold hosts take both query slots and are answered at the deadline.
	for _, host := range []string{"cold1.test", "cold2.test"} {
		code, reason, took := get(host)
		if code != http.StatusServiceUnavailable || reason != "catalog-unavailable" {
			t.Errorf("%s while the file is stalled: %d %q; want 503 catalog-unavailable", host, code, reason)
		}
		if took > timeout+faultMargin {
			t.Errorf("%s answered after %v; want the %v load deadline (+ at most %v)", host, took, timeout, faultMargin)
		}
	}
	// Their queries still hold the slots: no queue forms behind them.
	if code, reason, took := get("cold3.test"); code != http.StatusServiceUnavailable || reason != "catalog-busy" || took > faultMargin {
		t.Errorf("a third cold host: %d %q after %v; want 503 catalog-busy at once", code, reason, took)
	}
	if code, reason, took := get("cold1.test"); code != http.StatusServiceUnavailable || reason != "catalog-unavailable" || took > faultMargin {
		t.Errorf("a cold host whose load is late: %d %q after %v; want 503 catalog-unavailable at once", code, reason, took)
	}
	if s := p.srv.catalogStats(); s.InFlight != 2 || s.Waiters != 0 {
		t.Errorf("loader: %d in flight, %d waiting while the file is stalled; want 2, 0", s.InFlight, s.Waiters)
	}
	for reason, want := range map[string]float64{"catalog-unavailable": 3, "catalog-busy": 1} {
		if got := p.metric("levee_rejected_total", map[string]string{"app": "", "reason": reason}); got != want {
			t.Errorf("levee_rejected_total{reason=%s} = %v, want %v", reason, got, want)
		}
	}

	release()
	waitFor(t, "the stalled queries to return", func() bool { s := p.srv.catalogStats(); return s.InFlight == 0 })
	for _, host := range []string{"cold1.test", "cold2.test", "cold3.test", "hot.test"} {
		if code, body, _ := get(host); code != http.StatusOK || body != "stored" {
			t.Errorf("%s once the file is free: %d %q", host, code, body)
		}
	}
}
