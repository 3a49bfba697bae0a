// Package leaktest checks that a test leaves no goroutine behind: the
// shared leak check of levee's tests (STYLE.md, point 15), for tests that
// start servers, loaders and background calls and must join them all;
// and WaitFor, the shared poll for a state another goroutine reaches.
package leaktest

import (
	"bytes"
	"net/http"
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
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
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

// notTheTests are goroutines that are not the test's to end.
var notTheTests = []string{
	// Started once per process on first use, and kept.
	"os/signal.signal_recv",
	"github.com/valyala/fasthttp.updateServerDate",
	// fasthttp's cleaners look at their stop condition only between sleeps:
	// a HostClient's sleeps up to upstream.idle_timeout and ends at the
	// first round that finds no connection; a Server's worker pool's sleeps
	// MaxIdleWorkerDuration (10s) and ends at the first after Stop. Bounded,
	// but as long as Wait or longer.
	"github.com/valyala/fasthttp.(*HostClient).connsCleaner",
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
