package apps

import (
	"log/slog"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/health"
	"github.com/leveeproxy/levee/internal/observe"
)

func parse(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n" + y))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

func newTestTable(clk clock.Clock) (*Table, *forward.Upstreams) {
	m := observe.NewMetrics(nil)
	t := NewTable(Options{Clock: clk, Logger: slog.New(slog.DiscardHandler), Metrics: m,
		ErrorLog: m.ErrorLog(slog.New(slog.DiscardHandler), observe.ErrorLimits{})})
	return t, t.Upstreams()
}

// load puts cfg in force as a reload does, and gives back what it retired.
func load(t *Table, cfg *config.Config) map[string]Route {
	t.SetConfig(cfg)
	out := map[string]Route{}
	var retired []*forward.Upstream
	for _, name := range cfg.AppNames() {
		rt, old := t.Compose(name, cfg.Apps[name], forward.Trust{}, false)
		out[name], retired = rt, append(retired, old...)
	}
	t.ReleaseConns(append(retired, t.Applied()...))
	return out
}

const twoApps = `apps:
  a: {hosts: [a.test], backends: [127.0.0.1:9], limits: {concurrency: 3}}
  b: {hosts: [b.test], backends: [127.0.0.1:9]}
`

// TestTableKeepsStateAcrossReloads: a reload keeps each app's state (its
// limiter, its rate stores) and changes its limits in place; an app the
// new config drops is retired: unpublished, its pools given back.
func TestTableKeepsStateAcrossReloads(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	tab, ups := newTestTable(clk)
	first := load(tab, parse(t, twoApps))
	second := load(tab, parse(t, `apps:
  a: {hosts: [a.test], backends: [127.0.0.1:9], limits: {concurrency: 5}}
`))
	if second["a"].App != first["a"].App || second["a"].Gate.Limiter != first["a"].Gate.Limiter {
		t.Fatal("a reload made app a anew: its limiter would forget the requests it admitted")
	}
	if got := second["a"].Gate.Limiter.Limits().Concurrency; got != 5 {
		t.Fatalf("concurrency %d after the reload, want 5 (set in place)", got)
	}
	if _, ok := tab.Views().Get("b"); ok {
		t.Fatal("app b, gone from the config, is still published")
	}
	if n := ups.Len(); n != 1 {
		t.Fatalf("%d pools after b left; want the one a still uses", n)
	}
}

// TestTableParksAStoredApp: the last route of a stored app released parks
// its state; loaded again before it settles, the app takes it back, and
// a file app of the same name takes over a stored one.
func TestTableParksAStoredApp(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	tab, _ := newTestTable(clk)
	cfg := parse(t, twoApps)
	load(tab, cfg)
	stored := parse(t, "apps:\n  s: {hosts: [s.test], backends: [127.0.0.1:9]}\n").Apps["s"]
	r1, _ := tab.Compose("s", stored, forward.Trust{}, true)
	r2, _ := tab.Compose("s", stored, forward.Trust{}, true) // a refresh: a second route
	if r1.App != r2.App {
		t.Fatal("a recomposed stored app got new state")
	}
	if v, ok := tab.Views().Get("s"); !ok || !v.Stored {
		t.Fatalf("stored app published %v, stored %v", ok, ok && v.Stored)
	}
	if tab.Release(r1.App) != nil {
		t.Fatal("the first release retired the app while a route of it remains")
	}
	tab.Release(r2.App)
	if _, ok := tab.Views().Get("s"); ok {
		t.Fatal("a released stored app is still published")
	}
	again, _ := tab.Compose("s", stored, forward.Trust{}, true)
	if again.App != r1.App {
		t.Fatal("a stored app loaded again before it settled did not take its parked state back")
	}
	tab.Release(again.App)
	clk.Advance(ParkMin + time.Second)
	later, _ := tab.Compose("s", stored, forward.Trust{}, true)
	if later.App == r1.App {
		t.Fatal("a stored app loaded after its state settled got the old state")
	}
	file, _ := tab.Compose("s", stored, forward.Trust{}, false)
	if v, _ := tab.Views().Get("s"); v.Stored || file.App != later.App {
		t.Fatal("a file app named like a stored one is still shown as stored")
	}
}

// TestReloadRemakesTheCheckerForANewLeg: the health checker outlives a
// reload with the same settings, and one that changes the upstream
// protocol gets a checker that probes with the new one.
func TestReloadRemakesTheCheckerForANewLeg(t *testing.T) {
	tab, _ := newTestTable(clock.NewFake(time.Unix(1e9, 0)))
	const app = "apps:\n  a: {hosts: [a.test], backends: [127.0.0.1:9], health: {path: /healthz}"
	first := load(tab, parse(t, app+"}\n"))["a"].App.checker
	same := load(tab, parse(t, app+"}\n"))["a"].App.checker
	h2c := load(tab, parse(t, app+", upstream: {protocol: h2c}}\n"))["a"].App.checker
	if first == nil || same != first {
		t.Fatalf("checker %p, then %p after a reload that changed nothing; want it kept", first, same)
	}
	if h2c == first || h2c.Config().Protocol != health.H2C {
		t.Fatalf("after protocol h2c: the same checker %v, protocol %v; want a new one probing h2c",
			h2c == first, h2c.Config().Protocol)
	}
}
