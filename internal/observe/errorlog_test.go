package observe

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testErrorLog is an ErrorLog on a fake clock writing text lines to buf.
func testErrorLog(lim ErrorLimits) (*ErrorLog, *bytes.Buffer, *clock.Fake, prometheus.Counter, prometheus.Counter) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(1000, 0))
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	sums := prometheus.NewCounter(prometheus.CounterOpts{Name: "summaries"})
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return NewErrorLog(l, lim, clk, dropped, sums), &buf, clk, dropped, sums
}

var suppressedRE = regexp.MustCompile(`msg="suppressed (\d+) similar" event="?([^"=]+?)"? app=(\S+) count=(\d+)`)

// summed adds up the summaries in out, by event and app.
func summed(out string) map[string]int {
	got := map[string]int{}
	for _, m := range suppressedRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[4])
		got[m[2]+"/"+m[3]] += n
	}
	return got
}

func TestErrorLogLimitsEachEventAndAppAndSumsUp(t *testing.T) {
	el, buf, clk, dropped, sums := testErrorLog(ErrorLimits{PerSecond: 100, PerEvent: 3, Interval: 10 * time.Second})
	for range 1000 {
		el.Error(EventBackendUnreachable, "a", "backend", "b1")
		el.Error(EventBackendUnreachable, "b", "backend", "b2")
	}
	el.Error(EventBackendTimeout, "a")
	if got := strings.Count(buf.String(), "\n"); got != 7 {
		t.Fatalf("wrote %d lines; want 3 per (event, app) and the timeout's:\n%s", got, buf.String())
	}
	if got := testutil.ToFloat64(dropped); got != 2*997 {
		t.Fatalf("dropped counter = %v; want %d", got, 2*997)
	}
	clk.Advance(9 * time.Second)
	el.Sweep()
	if strings.Contains(buf.String(), "suppressed") {
		t.Fatal("summed up before the interval ended")
	}
	clk.Advance(time.Second)
	el.Sweep()
	if got := summed(buf.String()); got["backend unreachable/a"] != 997 || got["backend unreachable/b"] != 997 || len(got) != 2 {
		t.Fatalf("summaries = %v; want 997 for each app, none for the timeout (it dropped nothing)\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "interval=10s") {
		t.Fatalf("a summary does not say its interval:\n%s", buf.String())
	}
	if got := testutil.ToFloat64(sums); got != 2 {
		t.Fatalf("summaries counter = %v; want 2", got)
	}
	buf.Reset()
	el.Error(EventBackendUnreachable, "a")
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("after the interval, %d lines; want the key's budget fresh", got)
	}
}

func TestErrorLogKeepsTheGlobalCeiling(t *testing.T) {
	el, buf, clk, _, _ := testErrorLog(ErrorLimits{PerSecond: 10, PerEvent: 5, Interval: time.Second})
	const apps, perApp = 500, 20
	for range perApp {
		for i := range apps {
			el.Error(EventBackendUnreachable, fmt.Sprint("app", i))
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != 10 {
		t.Fatalf("wrote %d lines in a second over %d apps; want PerSecond (10)", got, apps)
	}
	clk.Advance(time.Second)
	el.Sweep()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// The second's budget: 10 summaries, then one merged line for the rest.
	if len(lines) != 10+10+1 {
		t.Fatalf("%d lines after the sweep; want 10 + 10 summaries + 1 merged", len(lines))
	}
	total := 10
	for _, n := range summed(buf.String()) {
		total += n
	}
	if total != apps*perApp {
		t.Fatalf("lines written and summed = %d; want every one of %d accounted for\n%s", total, apps*perApp, buf.String())
	}
}

func TestErrorLogMapIsBounded(t *testing.T) {
	el, buf, _, _, _ := testErrorLog(ErrorLimits{PerSecond: 100_000, PerEvent: 1, Interval: time.Minute})
	for i := range 100_000 {
		el.Error(EventBackendUnreachable, strconv.Itoa(i))
	}
	el.mu.Lock()
	n := len(el.keys)
	el.mu.Unlock()
	if n > MaxLogKeys+1 {
		t.Fatalf("%d keys tracked; want at most %d and one merged", n, MaxLogKeys)
	}
	el.Flush()
	if got := summed(buf.String())["backend unreachable/"+OtherApps]; got != 100_000-MaxLogKeys-1 {
		t.Fatalf("merged apps' summary = %d; want %d", got, 100_000-MaxLogKeys-1)
	}
}

func TestErrorLogTakesNothingAtALevelOff(t *testing.T) {
	var buf bytes.Buffer
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	el := NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), ErrorLimits{PerSecond: 1, PerEvent: 1}, nil, dropped, nil)
	for range 10 {
		if _, ok := el.Take(slog.LevelDebug, EventRefused, "a"); ok {
			t.Fatal("a debug line was allowed at info level")
		}
	}
	if _, ok := el.Take(slog.LevelError, EventBackendTimeout, "a"); !ok {
		t.Fatal("debug lines the level drops took the budget")
	}
	if testutil.ToFloat64(dropped) != 0 {
		t.Fatal("lines the level drops were counted as suppressed")
	}
}

func TestErrorLogRefusalAllocatesNothing(t *testing.T) {
	el, _, _, _, _ := testErrorLog(ErrorLimits{PerSecond: 1, PerEvent: 1, Interval: time.Hour})
	el.Error(EventBackendUnreachable, "a")
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := el.Take(slog.LevelError, EventBackendUnreachable, "a"); ok {
			t.Fatal("over budget, yet allowed")
		}
	})
	if allocs != 0 {
		t.Fatalf("a suppressed Take allocates %v times; want 0", allocs)
	}
}

func TestStdLoggerGoesThroughTheLimit(t *testing.T) {
	el, buf, _, _, _ := testErrorLog(ErrorLimits{PerSecond: 1, PerEvent: 1, Interval: time.Second})
	l := el.StdLogger("http")
	for range 10 {
		l.Printf("http: TLS handshake error from 1.2.3.4")
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("wrote %d lines; want 1", got)
	}
	if !strings.Contains(buf.String(), "source=http") {
		t.Fatalf("line lacks its source: %q", buf.String())
	}
}
