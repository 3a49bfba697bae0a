package drill

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/drill/drilltest"
)

// upgradeBrief is a light load (the race detector on a shared machine
// slows the in-process edge and generator down): 50/s to up.test, and
// 40/s to lim.test, limited to 20/s with a burst of 15, which the load
// empties in 0.75 s, before the first window opens at 1 s. Windows of
// about 2 s allow 20/s + 10%: 45; the bucket's own bound is 41.
func upgradeBrief(e *drilltest.Edge) Options {
	o := brief(Options{Target: e.URL, Host: "up.test", LimitHost: "lim.test", Limit: 20, BurstTolerance: 0.1, Runs: 2,
		Settle: 2 * time.Second, UpgradeRate: 50, UpgradeHold: time.Millisecond, RouteWait: waitTimeout})
	o.MaxInFlight = 1024 // a stall of seconds is latency, not overflow
	o.OnBackends = func(_ string, bs []*Backend) error { e.SetUpstream(bs[0].Addr); return nil }
	return o
}

// startBriefEdge is an edge with upgradeBrief's limit on lim.test, and
// conc in flight on up.test (0: none).
func startBriefEdge(t *testing.T, conc int) *drilltest.Edge {
	return drilltest.StartEdge(t, drilltest.EdgeOptions{LimitHost: "lim.test", Limit: 20, Burst: 15,
		ConcHost: "up.test", Concurrency: conc})
}

// An edge whose reload leaves its listener, its connections and its
// buckets alone passes.
func TestUpgradeDrillPassesAGoodReload(t *testing.T) {
	e := startBriefEdge(t, 0)
	var reloads atomic.Int64
	o := upgradeBrief(e)
	o.Command = drilltest.ReloadCommand(t, func() { reloads.Add(1) })
	r := upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Pass)
	waitFor(t, "the edge got both reloads", func() bool { return reloads.Load() == 2 })
	if len(r.Streams) != 2 || r.Streams[0].OK == 0 || r.Streams[1].Non2xx == 0 {
		t.Fatalf("streams %+v; want answers on up.test and refusals on lim.test", r.Streams)
	}
}

// An edge whose reload closes its listener for 300 ms fails, saying that
// connections were refused during the run.
func TestUpgradeDrillFailsADroppedListener(t *testing.T) {
	e := startBriefEdge(t, 0)
	o := upgradeBrief(e)
	o.Runs = 1
	o.Command = drilltest.ReloadCommand(t, func() { e.DropListener(300 * time.Millisecond) })
	r := upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	c := checkNamed(t, r, "no connection refused")
	if c.Pass || !strings.Contains(c.Got, "run 1:") {
		t.Fatalf("refused check %+v; want it failed, naming run 1", c)
	}
}

// An edge whose reload starts its rate bucket full lets a burst of 15
// more through in each window: about 55 where 45 are allowed.
func TestUpgradeDrillFailsABucketStartedFull(t *testing.T) {
	e := startBriefEdge(t, 0)
	o := upgradeBrief(e)
	o.Command = drilltest.ReloadCommand(t, e.ResetLimits)
	r := upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if c := checkNamed(t, r, "admitted per window spanning a run"); c.Pass {
		t.Fatalf("window check %+v passed; want it failed", c)
	}
	for _, name := range []string{"no connection refused", "no connection reset", "no truncated response"} {
		if c := checkNamed(t, r, name); !c.Pass {
			t.Fatalf("%s: %+v; only the burst was wrong", name, c)
		}
	}
}

// An edge whose reload starts a new concurrency limit while the old
// requests are still in flight lets the backend see twice the limit.
func TestUpgradeDrillFailsTwoConcurrencyBudgets(t *testing.T) {
	e := startBriefEdge(t, 4)
	o := upgradeBrief(e)
	o.LimitHost, o.Settle, o.Concurrency = "", time.Second, 4
	// 50/s x 200 ms = 10 wanted in flight: the 4 slots are always full
	o.UpgradeHold = 200 * time.Millisecond
	o.Command = drilltest.ReloadCommand(t, e.ResetLimits)
	r := upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if c := checkNamed(t, r, "backend in flight at most --concurrency"); c.Pass {
		t.Fatalf("concurrency check %+v passed; want it failed", c)
	}

	// the same edge, its semaphore kept: pass, with the limit reached
	o.Command = drilltest.ReloadCommand(t, func() {})
	r = upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Pass)
	if got := r.Ratios["backend in flight peak/concurrency"]; got != 1 {
		t.Fatalf("peak/concurrency %v; want the limit of 4 reached, not passed", got)
	}
}

// A command that fails fails the drill with its output, after its first run.
func TestUpgradeDrillFailsAFailingCommand(t *testing.T) {
	e := startBriefEdge(t, 0)
	o := upgradeBrief(e)
	o.LimitHost, o.Settle = "", 300*time.Millisecond
	o.Command = "echo 'config: bad line 3' >&2; exit 3"
	r := upgradeDrill.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	c := checkNamed(t, r, "command succeeded every run")
	if c.Pass || !strings.Contains(c.Got, "run 1 of 2 failed") || !strings.Contains(c.Got, "config: bad line 3") {
		t.Fatalf("command check %+v; want the first run's failure and its output", c)
	}
}

// The window check, fed fixed counts: GCRA's bound from the refusal's
// send, +2% and +1; a window with no refusal before it cannot pass.
func TestUpgradeWindowCheck(t *testing.T) {
	o := Options{Limit: 100, BurstTolerance: 0.02, LimitHost: "lim.test"}
	anchored := window{Run: 1, Sent: time.Second, From: time.Second + 5*time.Millisecond, To: 3 * time.Second, Anchored: true}
	for _, c := range []struct {
		name     string
		w        window
		admitted int64
		pass     bool
	}{
		{"at the bound", anchored, 205, true}, // 100/s x 2 s x 1.02 + 1
		{"one over", anchored, 206, false},
		{"a burst of 20 over", anchored, 220, false},
		{"no refusal before it", window{Run: 1, Sent: time.Second, From: time.Second, To: 3 * time.Second}, 150, false},
	} {
		up := &upgradeLoad{Windows: []window{c.w}, Admitted: []int64{c.admitted}}
		if got := windowCheck(o, up); got.Pass != c.pass {
			t.Errorf("%s: %+v; want pass %v", c.name, got, c.pass)
		}
	}
}
