package apps

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/topk"
)

// View is what the admin API reads of one app, as composed last; its
// fields are never written once published.
type View struct {
	Name    string
	Hosts   []string
	Stored  bool // from the catalog, not the config file
	Limiter *admit.Limiter
	Conf    admit.Limits // configured, before any scale
	Metrics *observe.AppMetrics
	Top     *topk.ClientTop // nil when limits.client.top_k is 0
	Guard   *protect.Guard  // nil when backend_limits is off
	Window  *balance.Window
	Set     *balance.Set
	Alert   *atomic.Bool // the imbalance alert
	Conns   []*forward.Upstream
	// Adaptive is the adaptive concurrency limit, which follows the
	// backends' latency; nil for a static one.
	Adaptive *limits.Adaptive
	// Bandwidth paces the app's bytes; nil when limits.bandwidth is off.
	Bandwidth *bandwidth.Limiter
	// Rate and ClientRate are limits.rate and limits.client.rate per
	// second (0: off), copied: the view does not keep the app's config.
	Rate, ClientRate float64
}

// ScaleView is the limit scale as the API shows it (the request path
// reads Scale's atomic instead).
type ScaleView struct {
	Unexpected bool
	Strict     float64
	Overload   float64
	Sample     *overload.Sample // the overload monitor's last reading; nil before one
}

// Views are the apps serving and the scale, as the admin API and the
// metrics collector read them (docs/admin.md). Each app's View is
// published whole when its route is composed, so reading takes no lock
// that composing (or a cold app's load) holds: a reader sees atomics and
// summaries under their own short locks. The zero Views is empty and
// ready; its methods are safe for concurrent use.
type Views struct {
	apps  sync.Map // name → *View
	scale atomic.Pointer[ScaleView]
}

// Publish makes v the view of app v.Name.
func (vs *Views) Publish(v *View) { vs.apps.Store(v.Name, v) }

// Unpublish hides a removed app.
func (vs *Views) Unpublish(name string) { vs.apps.Delete(name) }

// each calls fn for each app serving, in no order.
func (vs *Views) each(fn func(*View)) {
	vs.apps.Range(func(_, v any) bool {
		fn(v.(*View))
		return true
	})
}

// Get is the view of app name, as composed last; false for an app not
// serving.
func (vs *Views) Get(name string) (*View, bool) {
	v, ok := vs.apps.Load(name)
	if !ok {
		return nil, false
	}
	return v.(*View), true
}

// PublishScale publishes the scale; the overload monitor's last reading
// is kept.
func (vs *Views) PublishScale(sc ScaleView) {
	if old := vs.scale.Load(); old != nil {
		sc.Sample = old.Sample
	}
	vs.scale.Store(&sc)
}

// NoteSample keeps the overload monitor's last reading, with sc.
func (vs *Views) NoteSample(sc ScaleView, sample overload.Sample) {
	sc.Sample = &sample
	vs.scale.Store(&sc)
}

// factors is the scale in force now: strict × overload.
func (vs *Views) factors() (strict, overload float64) {
	v := vs.scale.Load()
	if v == nil {
		return 1, 1
	}
	return v.Strict, v.Overload
}

// summary is v as the app list shows it; imbalance is its backends'
// distribution over the last window (balance.Window.Observe, which the
// caller reads once for what it shows).
func (vs *Views) summary(v *View, now time.Time, imbalance float64) AppSummary {
	strict, over := vs.factors()
	sum := AppSummary{Name: v.Name, Hosts: v.Hosts, Stored: v.Stored, InFlight: v.Limiter.InFlight(),
		Queued: v.Limiter.Queued(), ConcurrencyLimit: v.Limiter.Limits().Concurrency,
		RateLimit: v.Rate * strict * over, LiveRates: v.Metrics.Live.Rates(now)}
	if sum.Hosts == nil {
		sum.Hosts = []string{}
	}
	sum.BackendsTotal = v.Set.Len()
	for i := range sum.BackendsTotal {
		if v.Set.Backend(i).Healthy(now) {
			sum.BackendsHealthy++
		}
	}
	sum.Imbalance, sum.ImbalanceAlert = imbalance, v.Alert.Load()
	if math.IsNaN(sum.Imbalance) || math.IsInf(sum.Imbalance, 0) {
		sum.Imbalance = 0
	}
	return sum
}

// Apps lists the apps serving at now, busiest (requests per second)
// first, then by name; at most limit (≤ 0: all). It also returns how many
// apps there are. Only the apps listed are summarised whole: ranking costs
// a few atomic loads per app.
func (vs *Views) Apps(limit int, now time.Time) ([]AppSummary, int) {
	type ranked struct {
		v    *View
		rate float64
	}
	var all []ranked
	vs.each(func(v *View) { all = append(all, ranked{v, v.Metrics.Live.RequestRate(now)}) })
	slices.SortFunc(all, func(a, b ranked) int {
		if c := cmp.Compare(b.rate, a.rate); c != 0 {
			return c
		}
		return cmp.Compare(a.v.Name, b.v.Name)
	})
	n := len(all)
	if limit > 0 && limit < n {
		all = all[:limit]
	}
	out := make([]AppSummary, len(all))
	for i, r := range all {
		_, imbalance := r.v.Window.Observe(r.v.Set, now)
		out[i] = vs.summary(r.v, now, imbalance)
	}
	return out, n
}

// App is one app's detail at now, or false for an app not serving.
func (vs *Views) App(name string, now time.Time) (AppDetail, bool) {
	v, ok := vs.Get(name)
	if !ok {
		return AppDetail{}, false
	}
	strict, over := vs.factors()
	shares, imbalance := v.Window.Observe(v.Set, now)
	d := AppDetail{AppSummary: vs.summary(v, now, imbalance), TopK: v.Top.K(), TopClients: []topk.Share{},
		Backends: v.backendStats(shares), BackendLimits: v.poolStats()}
	d.Configured = LimitView{Concurrency: v.Conf.Concurrency, QueueMaxLen: v.Conf.MaxLen, QueueWait: v.Conf.MaxWait,
		Rate: v.Rate, ClientRate: v.ClientRate}
	in := v.Limiter.Limits()
	d.InForce = LimitView{Concurrency: in.Concurrency, QueueMaxLen: in.MaxLen, QueueWait: in.MaxWait,
		Rate: d.Configured.Rate * strict * over, ClientRate: d.Configured.ClientRate * strict * over}
	d.Why = v.why(strict, over)
	if v.Top != nil {
		d.TopClients = v.Top.Report(0, 0, 10, 0, now).Clients
	}
	return d, true
}

// why explains how the limits in force differ from the configured ones.
func (v *View) why(strict, over float64) []string {
	why := []string{}
	if v.Adaptive != nil {
		c := v.Adaptive.Config() // limits.concurrency's min and max
		why = append(why, fmt.Sprintf("concurrency is adaptive (gradient, %d to %d): it follows the backends' latency", c.Min, c.Max))
	}
	if strict < 1 {
		why = append(why, fmt.Sprintf("this instance is unexpected (another levee holds the instance lock): limits × %.2f (instance.strict_fraction)", strict))
	}
	if over < 1 {
		why = append(why, fmt.Sprintf("the host is overloaded: limits × %.2f (overload)", over))
	}
	return why
}

// Top is the heaviest clients of app at now by a dimension over a window,
// the names as in topk.Dimensions and topk.WindowNames. ok false: no such
// app; err: a bad parameter.
func (vs *Views) Top(app, by, window string, now time.Time) (topk.Report, bool, error) {
	d, w, err := topk.Index(by, window)
	if err != nil {
		return topk.Report{}, true, err
	}
	v, ok := vs.Get(app)
	if !ok {
		return topk.Report{}, false, nil
	}
	return v.Top.Report(d, w, 0, 0, now), true, nil
}

// Instance is this instance's role, scale and number of apps; the caller
// adds what the views do not hold (cluster, config).
func (vs *Views) Instance() Instance {
	in := Instance{Role: "active", StrictFactor: 1, OverloadFactor: 1}
	if v := vs.scale.Load(); v != nil {
		in.StrictFactor, in.OverloadFactor = v.Strict, v.Overload
		if v.Unexpected {
			in.Role = "unexpected"
		}
		if v.Sample != nil {
			r := Reading(*v.Sample)
			in.Signals = &r
		}
	}
	vs.each(func(*View) { in.Apps++ })
	return in
}

// Reading is an overload sample in the metrics' units.
func Reading(s overload.Sample) observe.OverloadReading {
	return observe.OverloadReading{CPU: s.CPU, Load: s.Load, Memory: s.Memory,
		Goroutines: float64(s.Goroutines), GCPauseSeconds: s.GCPause.Seconds()}
}

// EachStats reports every app's state at now (for the metrics collector).
func (vs *Views) EachStats(now time.Time, fn func(observe.AppStats)) {
	vs.each(func(v *View) { fn(v.stats(now)) })
}

// Stats is one app's state at now, or false if no such app.
func (vs *Views) Stats(name string, now time.Time) (observe.AppStats, bool) {
	v, ok := vs.Get(name)
	if !ok {
		return observe.AppStats{}, false
	}
	return v.stats(now), true
}

// stats reads an app's gauges and its backends' distribution over the
// last window.
func (v *View) stats(now time.Time) observe.AppStats {
	st := observe.AppStats{Name: v.Name, InFlight: v.Limiter.InFlight(), Queued: v.Limiter.Queued(),
		Limit: v.Limiter.Limits().Concurrency, Overloaded: v.Limiter.Overloaded(), ImbalanceAlert: v.Alert.Load(),
		TopClients: v.Top.Top(now)}
	st.Pool = v.poolStats()
	var shares []balance.Share
	shares, st.Imbalance = v.Window.Observe(v.Set, now)
	st.Backends = v.backendStats(shares)
	return st
}

// poolStats is v's backend_limits state (nil when off).
func (v *View) poolStats() *observe.PoolStats {
	if v.Guard == nil {
		return nil
	}
	g := v.Guard.Stats()
	return &observe.PoolStats{InFlight: g.InFlight, Queued: g.Queued, InflightLimit: g.InflightLimit, Rate: g.Rate}
}

func (v *View) backendStats(shares []balance.Share) []observe.BackendStats {
	out := make([]observe.BackendStats, 0, len(shares))
	for _, sh := range shares {
		b := observe.BackendStats{Addr: sh.ID, Weight: sh.Weight, Healthy: sh.Healthy,
			InFlight: sh.InFlight, Latency: sh.Latency, Share: sh.Share, Requests: sh.Requests}
		for _, c := range v.Conns {
			if c.Addr() == sh.ID {
				b.Conns = observe.NewConnStats(c.Counts())
				break
			}
		}
		out = append(out, b)
	}
	return out
}
