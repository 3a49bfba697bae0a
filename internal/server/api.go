package server

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/topk"
)

// The live view of the admin API (docs/admin.md). It reads what the
// request path writes (atomics, and summaries under their own short
// locks) and never takes Server.mu, which a cold app's load needs: each
// app's view is published by composeApp as an immutable appView, and the
// apps serving are found in Server.views.

// appView is what the API reads of one app, as composed last.
type appView struct {
	name    string
	hosts   []string
	stored  bool
	limiter *admit.Limiter
	conf    admit.Limits   // configured, before any scale
	limits  *config.Limits // the app config's, never written
	metrics *observe.AppMetrics
	top     *topk.ClientTop
	guard   *protect.Guard
	window  *balance.Window
	set     *balance.Set
	alert   *atomic.Bool // the imbalance alert
	conns   []*forward.Upstream
	// adaptive: the concurrency limit follows the backends' latency.
	adaptive bool
}

// publish makes rt's app visible to the API as composed; the caller holds
// s.mu.
func (s *Server) publish(a *app, ac *config.App, rt *route) {
	v := &appView{name: a.name, hosts: ac.Hosts, stored: a.stored != nil, limiter: a.limiter, conf: a.conf,
		limits: &ac.Limits, metrics: a.metrics, top: a.top.v, guard: rt.guard, window: a.window, set: a.backends,
		alert: a.alert, adaptive: a.adaptive != nil, conns: a.conns}
	s.views.Store(a.name, v)
}

// unpublish hides a removed app; the caller holds s.mu.
func (s *Server) unpublish(name string) { s.views.Delete(name) }

// eachView calls fn for each app serving, in no order.
func (s *Server) eachView(fn func(*appView)) {
	s.views.Range(func(_, v any) bool {
		fn(v.(*appView))
		return true
	})
}

func (s *Server) view(name string) (*appView, bool) {
	v, ok := s.views.Load(name)
	if !ok {
		return nil, false
	}
	return v.(*appView), true
}

// factors is the scale in force now: strict × overload (see scale.go).
func (s *Server) factors() (strict, overload float64) {
	v := s.scaleView.Load()
	if v == nil {
		return 1, 1
	}
	return v.strict, v.overload
}

// summary is v as the app list shows it; imbalance is its backends'
// distribution over the last window (balance.Window.Observe, which the
// caller reads once for what it shows).
func (s *Server) summary(v *appView, now time.Time, imbalance float64) apps.AppSummary {
	strict, over := s.factors()
	sum := apps.AppSummary{Name: v.name, Hosts: v.hosts, Stored: v.stored, InFlight: v.limiter.InFlight(),
		Queued: v.limiter.Queued(), ConcurrencyLimit: v.limiter.Limits().Concurrency,
		RateLimit: v.limits.Rate.PerSecond() * strict * over, LiveRates: v.metrics.Live.Rates(now)}
	if sum.Hosts == nil {
		sum.Hosts = []string{}
	}
	sum.BackendsTotal = v.set.Len()
	for i := range sum.BackendsTotal {
		if v.set.Backend(i).Healthy(now) {
			sum.BackendsHealthy++
		}
	}
	sum.Imbalance, sum.ImbalanceAlert = imbalance, v.alert.Load()
	if math.IsNaN(sum.Imbalance) || math.IsInf(sum.Imbalance, 0) {
		sum.Imbalance = 0
	}
	return sum
}

// Apps lists the apps serving, busiest (requests per second) first, then
// by name; at most limit (≤ 0: all). It also returns how many apps there
// are. Only the apps listed are summarised whole: ranking costs a few
// atomic loads per app.
func (s *Server) Apps(limit int) ([]apps.AppSummary, int) {
	now := s.clk.Now()
	type ranked struct {
		v    *appView
		rate float64
	}
	var all []ranked
	s.eachView(func(v *appView) { all = append(all, ranked{v, v.metrics.Live.RequestRate(now)}) })
	slices.SortFunc(all, func(a, b ranked) int {
		if c := cmp.Compare(b.rate, a.rate); c != 0 {
			return c
		}
		return cmp.Compare(a.v.name, b.v.name)
	})
	n := len(all)
	if limit > 0 && limit < n {
		all = all[:limit]
	}
	out := make([]apps.AppSummary, len(all))
	for i, r := range all {
		_, imbalance := r.v.window.Observe(r.v.set, now)
		out[i] = s.summary(r.v, now, imbalance)
	}
	return out, n
}

// App is one app's detail, or false for an app not serving.
func (s *Server) App(name string) (apps.AppDetail, bool) {
	v, ok := s.view(name)
	if !ok {
		return apps.AppDetail{}, false
	}
	now := s.clk.Now()
	strict, over := s.factors()
	shares, imbalance := v.window.Observe(v.set, now)
	d := apps.AppDetail{AppSummary: s.summary(v, now, imbalance), TopK: v.top.K(), TopClients: []topk.Share{},
		Backends: v.backendStats(shares), BackendLimits: v.poolStats()}
	d.Configured = apps.LimitView{Concurrency: v.conf.Concurrency, QueueMaxLen: v.conf.MaxLen, QueueWait: v.conf.MaxWait,
		Rate: v.limits.Rate.PerSecond(), ClientRate: v.limits.Client.Rate.PerSecond()}
	in := v.limiter.Limits()
	d.InForce = apps.LimitView{Concurrency: in.Concurrency, QueueMaxLen: in.MaxLen, QueueWait: in.MaxWait,
		Rate: d.Configured.Rate * strict * over, ClientRate: d.Configured.ClientRate * strict * over}
	d.Why = s.why(v, strict, over)
	if v.top != nil {
		d.TopClients = v.top.Report(0, 0, 10, 0, now).Clients
	}
	return d, true
}

// why explains how the limits in force differ from the configured ones.
func (s *Server) why(v *appView, strict, over float64) []string {
	why := []string{}
	if v.adaptive {
		why = append(why, fmt.Sprintf("concurrency is adaptive (gradient, %d to %d): it follows the backends' latency",
			v.limits.Concurrency.Min, v.limits.Concurrency.Max))
	}
	if strict < 1 {
		why = append(why, fmt.Sprintf("this instance is unexpected (another levee holds the instance lock): limits × %.2f (instance.strict_fraction)", strict))
	}
	if over < 1 {
		why = append(why, fmt.Sprintf("the host is overloaded: limits × %.2f (overload)", over))
	}
	return why
}

// Top is the heaviest clients of app by a dimension over a window, the
// names as in topk.Dimensions and topk.WindowNames. ok false: no
// such app; err: a bad parameter.
func (s *Server) Top(app, by, window string) (topk.Report, bool, error) {
	d, w, err := topk.Index(by, window)
	if err != nil {
		return topk.Report{}, true, err
	}
	v, ok := s.view(app)
	if !ok {
		return topk.Report{}, false, nil
	}
	return v.top.Report(d, w, 0, 0, s.clk.Now()), true, nil
}

// scaleView is the limit scale as the API shows it, published whenever
// it changes (the request path reads scaleState.rate instead).
type scaleView struct {
	unexpected bool
	strict     float64
	overload   float64
	sample     *overload.Sample // the monitor's last reading; nil before one
}

// publishScale publishes the scale; the caller holds s.mu.
func (s *Server) publishScale() {
	v := &scaleView{unexpected: s.scale.unexpected, strict: s.scale.strict, overload: s.scale.overload}
	if old := s.scaleView.Load(); old != nil {
		v.sample = old.sample
	}
	s.scaleView.Store(v)
}

// noteSample keeps the overload monitor's last reading for the API; owned
// by the overload loop.
func (s *Server) noteSample(sample overload.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishScale()
	v := *s.scaleView.Load()
	v.sample = &sample
	s.scaleView.Store(&v)
}

// Instance reports this instance's role, scale and cluster state.
func (s *Server) Instance() apps.Instance {
	in := apps.Instance{Role: "active", StrictFactor: 1, OverloadFactor: 1}
	if v := s.scaleView.Load(); v != nil {
		in.StrictFactor, in.OverloadFactor = v.strict, v.overload
		if v.unexpected {
			in.Role = "unexpected"
		}
		if v.sample != nil {
			r := observeReading(*v.sample)
			in.Signals = &r
		}
	}
	snap := s.current.Load()
	if c := s.cluster; c != nil {
		in.Cluster = &apps.ClusterState{Redis: snap.cfg.Cluster.Redis.Addrs, Degraded: c.Degraded(), Reachable: !c.Degraded(),
			LiveInstances: c.Live()}
	}
	s.eachView(func(*appView) { in.Apps++ })
	in.ConfigChecksum, in.ConfigLoaded = snap.cfg.Checksum, snap.loaded
	return in
}
