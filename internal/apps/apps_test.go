package apps

import (
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/health"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

func strictConfig(unexpected string, fraction config.Percent) *config.Config {
	cfg := &config.Config{}
	cfg.Instance.Unexpected, cfg.Instance.StrictFraction = unexpected, fraction
	return cfg
}

// TestScale steps the scale through takeover and overload: the rate
// factor the request path reads follows strict × overload, and bandwidth
// only the strict factor.
func TestScale(t *testing.T) {
	var sc Scale
	sc.Init()
	factor := func() float64 { return math.Float64frombits(sc.RateFactor().Load()) }
	sc.SetConfig(strictConfig(config.UnexpectedStrict, 50))
	if factor() != 1 || sc.BandwidthRate(1000) != 1000 || sc.LeastBandwidth(1000) != 500 {
		t.Fatalf("active: factor %v, bandwidth %d, least %d; want 1, 1000, 500",
			factor(), sc.BandwidthRate(1000), sc.LeastBandwidth(1000))
	}
	sc.SetUnexpected(true)
	if sc.Strict() != 1 {
		t.Fatal("the strict factor changed before the config was applied again")
	}
	sc.SetConfig(strictConfig(config.UnexpectedStrict, 50))
	if factor() != 0.5 || sc.BandwidthRate(1000) != 500 || sc.BandwidthRate(0) != 0 {
		t.Fatalf("unexpected: factor %v, bandwidth %d; want 0.5, 500 (0 stays off)", factor(), sc.BandwidthRate(1000))
	}
	if !sc.SetOverload(0.5) || sc.SetOverload(0.5) {
		t.Fatal("SetOverload must report a change once")
	}
	if factor() != 0.25 || sc.LimitFactor() != 0.25 || sc.BandwidthRate(1000) != 500 {
		t.Fatalf("overloaded: factor %v, limit factor %v, bandwidth %d; want 0.25, 0.25, 500",
			factor(), sc.LimitFactor(), sc.BandwidthRate(1000))
	}
	if v := sc.View(); v != (ScaleView{Unexpected: true, Strict: 0.5, Overload: 0.5}) {
		t.Fatalf("view %+v", v)
	}
	if got := ScaleLimits(admit.Limits{Concurrency: 3, MaxLen: 7}, 0.1); got.Concurrency != 1 || got.MaxLen != 7 {
		t.Fatalf("ScaleLimits = %+v; want concurrency 1 (never below), the queue kept", got)
	}
}

func testView(name string, clk clock.Clock, m *observe.Metrics) *View {
	return &View{Name: name, Limiter: admit.NewLimiter(admit.Limits{Concurrency: 4}, clk),
		Metrics: m.App(name), Window: balance.NewWindow(time.Minute),
		Set: balance.NewSet([]balance.Spec{{ID: "b1", Weight: 1}}, nil, clk.Now()), Alert: new(atomic.Bool)}
}

// TestViews: published apps are listed by name when equally busy, at
// most limit of them; an unpublished app is gone from every answer; the
// instance carries the scale and the overload monitor's last reading.
func TestViews(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	m := observe.NewMetrics(nil)
	var vs Views
	for _, name := range []string{"c", "a", "b"} {
		vs.Publish(testView(name, clk, m))
	}
	list, total := vs.Apps(2, clk.Now())
	if total != 3 || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("Apps(2) = %+v, %d; want a, b of 3", list, total)
	}
	if d, ok := vs.App("a", clk.Now()); !ok || d.ConcurrencyLimit != 4 || d.BackendsTotal != 1 || len(d.Why) != 0 {
		t.Fatalf("App(a) = %+v, %v", d, ok)
	}
	vs.Unpublish("a")
	if _, ok := vs.App("a", clk.Now()); ok {
		t.Fatal("an unpublished app still answers")
	}
	if _, ok := vs.Stats("a", clk.Now()); ok {
		t.Fatal("an unpublished app still has stats")
	}
	if _, _, err := vs.Top("b", "nonsense", "1m", clk.Now()); err == nil {
		t.Fatal("Top took a bad dimension")
	}
	vs.PublishScale(ScaleView{Unexpected: true, Strict: 0.5, Overload: 1})
	vs.NoteSample(ScaleView{Unexpected: true, Strict: 0.5, Overload: 0.8}, overload.Sample{CPU: 0.9})
	vs.PublishScale(ScaleView{Unexpected: true, Strict: 0.5, Overload: 0.8}) // keeps the reading
	in := vs.Instance()
	if in.Role != "unexpected" || in.StrictFactor != 0.5 || in.OverloadFactor != 0.8 || in.Apps != 2 ||
		in.Signals == nil || in.Signals.CPU != 0.9 {
		t.Fatalf("Instance = %+v", in)
	}
	d, _ := vs.App("b", clk.Now())
	if len(d.Why) != 2 {
		t.Fatalf("why = %q; want the strict and the overload factor explained", d.Why)
	}
}

// TestRatesOutliveARecompose: the stores an app's rate rules decide in
// are made once, when a limit first comes on, and a route composed again
// gets the same ones, so a reload never hands out a fresh burst.
func TestRatesOutliveARecompose(t *testing.T) {
	lim := ratelimit.Limit{Interval: time.Second, Burst: 1}
	compose := func(app, client bool) *limits.Gate {
		g := &limits.Gate{}
		if app {
			g.AppRate = limits.NewRule("a", "rate", lim)
		}
		if client {
			g.ClientRate = limits.NewRule("a-client", "client-rate", lim)
		}
		return g
	}
	var r Rates
	r.Apply(compose(false, false), nil, "a", 8)
	if r.app != nil || r.client != nil {
		t.Fatal("state made for an app without rate limits")
	}
	first := compose(true, false)
	r.Apply(first, nil, "a", 8)
	if first.AppRate.Store == nil || r.client != nil {
		t.Fatal("the app's limit got no store, or the clients' was made unasked")
	}
	again := compose(true, true)
	r.Apply(again, nil, "a", 8)
	if again.AppRate.Store != first.AppRate.Store || again.ClientRate.Store == nil {
		t.Fatal("a recomposed route got a new app store, or no client store")
	}
	r.Sweep(time.Unix(1e9, 0))
	r.Forget() // nothing shared: a no-op
}

// TestParked: an app taken back before its state settles gets it back;
// one taken after, or parked beyond the limit (the oldest first), gets
// nothing and its state is dropped once.
func TestParked(t *testing.T) {
	now := time.Unix(1e9, 0)
	var p Parked[string]
	var dropped []string
	drop := func(a string) { dropped = append(dropped, a) }
	p.Park("a", "state-a", now.Add(time.Minute), 2, drop)
	p.Park("b", "state-b", now.Add(time.Minute), 2, drop)
	p.Park("c", "state-c", now.Add(time.Minute), 2, drop) // a goes: the oldest beyond 2
	if _, ok := p.Take("a", now, drop); ok || len(dropped) != 1 || dropped[0] != "state-a" {
		t.Fatalf("beyond the limit: dropped %q; want state-a dropped and not taken", dropped)
	}
	if a, ok := p.Take("b", now.Add(time.Minute), drop); !ok || a != "state-b" {
		t.Fatalf("Take(b) within its time = %q, %v", a, ok)
	}
	if _, ok := p.Take("b", now, drop); ok {
		t.Fatal("taken twice")
	}
	if _, ok := p.Take("c", now.Add(time.Minute+1), drop); ok || len(dropped) != 2 {
		t.Fatalf("settled: dropped %q; want state-c dropped and not taken", dropped)
	}
	c := &config.App{}
	c.Limits.Rate = config.Rate{Events: 1, Per: time.Hour}
	c.Limits.Burst = 2
	if got := Settle(c); got != 2*time.Hour {
		t.Fatalf("Settle = %v after eviction; want 2h (a full bucket of 2 at 1/h)", got)
	}
	if got := Settle(nil); got != ParkMin {
		t.Fatalf("Settle without rate limits = %v; want ParkMin", got)
	}
}

// TestComponents: a component whose setting is off is nil; the guard is
// made at the strict fraction; a bandwidth limiter's rate changes in
// place.
func TestComponents(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	if NewGuard(GuardKey{Strict: 1}, clk) != nil {
		t.Fatal("a guard for backend_limits off")
	}
	g := NewGuard(GuardKey{Config: config.BackendLimits{Inflight: 20}, Wait: admit.Limits{MaxLen: 1}, Strict: 0.1}, clk)
	if st := g.Stats(); st.InflightLimit != 2 {
		t.Fatalf("guard inflight limit %d at strict 0.1; want 2 (of 20)", st.InflightLimit)
	}
	var sc Scale
	sc.Init()
	if NewPaced("a", config.Bandwidth{}, &sc, nil, clk) != nil {
		t.Fatal("a limiter for limits.bandwidth off")
	}
	p := NewPaced("a", config.Bandwidth{Rate: 1_000_000, MaxDelay: config.Duration(time.Second)}, &sc, nil, clk)
	l := p.Limiter()
	p.SetRate(100_000)
	if p.Limiter() != l || l.Rate() != 100_000 {
		t.Fatalf("after SetRate: limiter kept %v, rate %d; want the same one at 100000", p.Limiter() == l, l.Rate())
	}
	p.Forget()
	(*Paced)(nil).Forget()
}

// A checker probes as the app's leg speaks, gRPC included, and is off
// without path or grpc.
func TestNewCheckerSpeaksTheLeg(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	log := slog.New(slog.DiscardHandler)
	h := config.DefaultApp().Health
	if NewChecker(nil, h, config.AppUpstream{Protocol: config.ProtocolH2C}, clk, log) != nil {
		t.Fatal("a checker for health off")
	}
	for _, tc := range []struct {
		up   config.Protocol
		grpc bool
		want health.Protocol
	}{
		{config.ProtocolHTTP1, false, health.HTTP1},
		{config.ProtocolH2C, false, health.H2C},
		{config.ProtocolH2, false, health.H2},
		{config.ProtocolH2C, true, health.H2C},
	} {
		h := h
		h.Path, h.GRPC, h.Service = "/healthz", tc.grpc, ""
		if tc.grpc {
			h.Path, h.Service = "", "pkg.Echo"
		}
		c := NewChecker(nil, h, config.AppUpstream{Protocol: tc.up}, clk, log)
		if got := c.Config(); got.Protocol != tc.want || got.GRPC != tc.grpc || got.Service != h.Service {
			t.Errorf("%v grpc=%v: checker %+v; want protocol %v", tc.up, tc.grpc, got, tc.want)
		}
	}
}
