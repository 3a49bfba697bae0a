// Package leaktest checks that a test leaves no goroutine behind: the
// shared leak check of levee's tests (STYLE.md, point 15), for tests that
// start servers, loaders and background calls and must join them all;
// CheckFiles, the same for open files; Sample and Growth, for a soak
// whose goroutines, files and heap must stay flat; and WaitFor, the
// shared poll for a state another goroutine reaches.
package leaktest

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Wait is how long Check waits for goroutines to end: a deadline that only
// catches a leak, not a measure of how fast they end.
const Wait = 10 * time.Second

// Check fails t if goroutines started during the test still run once it
// has cleaned up. Call it first in the test: its cleanup then runs last,
// after every server the test started has stopped. It closes the idle
// connections of http.DefaultTransport first (the default client's
// keep-alive goroutines outlive a test by design).
func Check(t testing.TB) { check(t, Wait) }

// CheckIgnoring is Check, not counting goroutines whose stacks contain any
// of funcs: for a test-only dependency whose own goroutines may outlive
// its Stop (toxiproxy's links block on a channel send once a side has
// closed), so that the check still covers everything of levee's.
func CheckIgnoring(t testing.TB, funcs ...string) { check(t, Wait, funcs...) }

func check(t testing.TB, wait time.Duration, ignore ...string) {
	t.Helper()
	before := ids(stacks())
	t.Cleanup(func() {
		t.Helper()
		closeDefaultIdle()
		deadline := time.Now().Add(wait)
		for {
			left := leaked(before, ignore)
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leaktest: %d goroutines started by the test still run after %v:\n\n%s",
					len(left), wait, strings.Join(left, "\n\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// closeDefaultIdle closes the idle connections of http.DefaultTransport:
// the default client's keep-alive goroutines and sockets outlive a test
// by design.
func closeDefaultIdle() {
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// notTheTests are goroutines that are not the test's to end.
var notTheTests = []string{
	// Started once per process on first use, and kept.
	"os/signal.signal_recv",
	"github.com/valyala/fasthttp.updateServerDate",
	// fasthttp's Server's worker pool cleaner looks at its stop condition
	// only between sleeps of MaxIdleWorkerDuration (10s), and ends at the
	// first after Stop. Bounded, but as long as Wait or longer.
	"github.com/valyala/fasthttp.(*workerPool).Start.func",
}

// leaked returns the stacks of the goroutines not in before, except the
// caller's, those not the test's and those in ignore's functions.
func leaked(before map[int]bool, ignore []string) []string {
	all := stacks()
	self := all[0] // runtime.Stack lists the caller first
	var out []string
	for _, g := range all {
		id, ok := idOf(g)
		in := func(f string) bool { return strings.Contains(g, f) }
		if !ok || before[id] || g == self || slices.ContainsFunc(notTheTests, in) || slices.ContainsFunc(ignore, in) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// stacks are the stacks of every goroutine, the caller's first.
func stacks() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(bytes.TrimSpace(buf[:n])), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func ids(gs []string) map[int]bool {
	m := make(map[int]bool, len(gs))
	for _, g := range gs {
		if id, ok := idOf(g); ok {
			m[id] = true
		}
	}
	return m
}

// idOf reads N from a stack's first line, "goroutine N [state]:".
func idOf(g string) (int, bool) {
	rest, ok := strings.CutPrefix(g, "goroutine ")
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(rest, " ")
	id, err := strconv.Atoi(n)
	return id, err == nil
}

// WaitFor polls cond until it holds, failing t (and stopping the test),
// with what it waited for, if it does not within max: the one poll of
// levee's tests, for a state another goroutine reaches (a request queued,
// a count reached), never to order goroutines by sleeping.
func WaitFor(t testing.TB, max time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(max)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", max, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// CheckFiles fails t if file descriptors opened during the test are still
// open once it has cleaned up: sockets and files a server forgot to
// close. Call it first in the test, as Check. The runtime's own (the
// poller's, opened at the first network use, and kept) are not counted.
// It checks nothing where /proc/self/fd is missing.
func CheckFiles(t testing.TB) { checkFiles(t, Wait) }

func checkFiles(t testing.TB, wait time.Duration) {
	t.Helper()
	before, err := openFiles()
	if err != nil {
		return
	}
	t.Cleanup(func() {
		t.Helper()
		closeDefaultIdle()
		deadline := time.Now().Add(wait)
		for {
			now, err := openFiles()
			if err != nil {
				t.Errorf("leaktest: open files: %v", err)
				return
			}
			var left []string
			for fd, what := range now {
				if before[fd] != what {
					left = append(left, fmt.Sprintf("%d -> %s", fd, what))
				}
			}
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				slices.Sort(left)
				t.Errorf("leaktest: %d files opened by the test are still open after %v:\n%s",
					len(left), wait, strings.Join(left[:min(len(left), maxListed)], "\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// maxListed is how many of the files left open CheckFiles names.
const maxListed = 20

// openFiles maps the process's open descriptors to what each is
// ("socket:[123]", a path), without the runtime's anonymous inodes
// (epoll, eventfd) and the directory read to list them.
func openFiles() (map[int]string, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(ents))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		what, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(what, "anon_inode:") || strings.HasPrefix(what, "/proc/") {
			continue // closed meanwhile (the listing's own), or not the test's
		}
		out[fd] = what
	}
	return out, nil
}

// Usage is what the process holds at one moment.
type Usage struct {
	Goroutines int
	Files      int    // open file descriptors; 0 where /proc/self/fd is missing
	Heap       uint64 // bytes of live heap objects
}

// Sample measures the process's Usage now, not counting goroutines whose
// stacks contain any of ignore's functions (a pool's idle workers, kept
// for a while by design). It collects garbage twice first, so that Heap is
// what is live, not what awaits collection or sits in a sync.Pool: a pause
// of some milliseconds, for samples taken between rounds of load.
func Sample(ignore ...string) Usage {
	runtime.GC()
	runtime.GC() // a sync.Pool's items survive one collection
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	files, _ := openFiles()
	g := runtime.NumGoroutine()
	if len(ignore) > 0 {
		g = 0
		for _, st := range stacks() {
			if !slices.ContainsFunc(ignore, func(f string) bool { return strings.Contains(st, f) }) {
				g++
			}
		}
	}
	return Usage{Goroutines: g, Files: len(files), Heap: ms.HeapAlloc}
}

// Growth compares two windows of samples taken under the same load, as
// bench/soak.sh does: it returns an error naming each resource whose mean
// over later exceeds its mean over earlier by more than the fraction
// tolerance of it plus slack (for noise), and nil if none does.
func Growth(earlier, later []Usage, tolerance float64, slack Usage) error {
	if len(earlier) == 0 || len(later) == 0 {
		return fmt.Errorf("leaktest: growth needs samples in both windows (got %d and %d)", len(earlier), len(later))
	}
	var grew []string
	for _, r := range []struct {
		name  string
		of    func(Usage) float64
		slack float64
	}{
		{"goroutines", func(u Usage) float64 { return float64(u.Goroutines) }, float64(slack.Goroutines)},
		{"open files", func(u Usage) float64 { return float64(u.Files) }, float64(slack.Files)},
		{"heap bytes", func(u Usage) float64 { return float64(u.Heap) }, float64(slack.Heap)},
	} {
		a, b := mean(earlier, r.of), mean(later, r.of)
		if b > a*(1+tolerance)+r.slack {
			grew = append(grew, fmt.Sprintf("%s: mean %.0f, then %.0f (at most %.0f is flat)", r.name, a, b, a*(1+tolerance)+r.slack))
		}
	}
	if len(grew) > 0 {
		return fmt.Errorf("leaktest: growing under a steady load: %s", strings.Join(grew, "; "))
	}
	return nil
}

func mean(us []Usage, of func(Usage) float64) float64 {
	var sum float64
	for _, u := range us {
		sum += of(u)
	}
	return sum / float64(len(us))
}
