package apps

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/health"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/spill"
	"github.com/leveeproxy/levee/internal/topk"
)

// Options are a Table's collaborators, the server's, fixed for its life.
type Options struct {
	Clock    clock.Clock
	Logger   *slog.Logger
	ErrorLog *observe.ErrorLog
	Metrics  *observe.Metrics
	Buffers  *membuf.Budget // server.buffer_memory
	Spill    *spill.Budget  // server.spill
	// Cluster is the config's cluster section (fixed for the table's life):
	// when on, the apps' rate and bandwidth limits are shared through it.
	Cluster config.Cluster
	// Sampler reads the host for the overload monitor; nil: the real
	// host, from the first enabled sample on.
	Sampler overload.Sampler
}

// Table owns the state of every app that outlives reloads, by app name:
// it composes each app's request path from the app's config (the config
// file's or the catalog's), keeps each per-app component across reloads
// by one rule (Kept), parks evicted stored apps, tears an app down in one
// place (retire), scales the limits (strict × overload), sweeps idle rate
// state, raises the distribution alerts, and publishes the views the
// admin API reads. Its methods are safe for concurrent use; the views are
// read without its lock. It starts no goroutine but the apps' health
// checkers, and those only between StartChecks and StopChecks.
type Table struct {
	o Options

	mu     sync.Mutex // guards everything below but views and overload
	cfg    *config.Config
	apps   map[string]*App
	parked Parked[*App]
	scale  Scale
	shapes limits.ShapeCache
	// checks is the context of the health checkers, nil before
	// StartChecks; stopChecks ends it.
	checks     context.Context
	stopChecks context.CancelFunc

	// upstreams are the connection pools by backend address, shared by
	// the apps: each holds those of its backends (App.conns).
	upstreams forward.Upstreams
	cluster   *cluster.Cluster // nil outside cluster mode
	views     Views
	overload  overloadWatch // owned by the overload loop (Run, OverloadTick)

	// held counts, by app, the slots its limiter and its backend_limits
	// hold for the requests still in flight in the levee this one took
	// over from (report.go).
	held map[string]*heldSlots
	// reporter, once this levee has handed over in its turn (Report),
	// passes on what the one it took over from reports (ApplyReport).
	reporter atomic.Pointer[Reporter]
	// pending is the state handed over for apps not composed yet
	// (pending.go); pendingDropped counts what was dropped unused.
	pending        Parked[*pendingApp]
	pendingDropped atomic.Uint64
	// emptyAt is when a state that could not be read was handed over
	// (zero: none): apps composed anew start their buckets empty as of it.
	emptyAt time.Time
}

// App is the state of one app that survives reloads: its concurrency limit
// keeps counting requests admitted under the old config, so a reload can
// never let more than the limit through; its connection pools stay warm.
// Name and Metrics are what the request path reads of it; the rest is
// guarded by its Table's lock.
type App struct {
	Name    string
	Metrics *observe.AppMetrics

	limiter *admit.Limiter
	conf    admit.Limits // as configured; the limiter holds them scaled
	// rate and clientRate (limits.rate, limits.client.rate; zero: off),
	// settle (Settle) and imbalanceAlert (balance.imbalance_alert) are
	// what the app reads of its config once composed, copied out: the
	// config itself, some 650 B, is not kept for a few of its fields.
	rate, clientRate ratelimit.Limit
	settle           time.Duration
	imbalanceAlert   float64
	// conns are the shared connection pools of the app's backends, in the
	// order of its last composed route's.
	conns []*forward.Upstream
	// backends is the balancer's backend state (in flight, latency, health),
	// carried into the next config's pool so a reload does not forget it.
	backends *balance.Set
	adaptive *limits.Adaptive // nil for a static concurrency limit
	// window measures the backends' shares of requests; alert is whether
	// the imbalance is over its threshold.
	window *balance.Window
	alert  *atomic.Bool // made with the app; read by the metrics and the API
	// rates holds the app's rate limit state, kept so a reload never hands
	// out a fresh burst.
	rates Rates
	// The components made from the app's settings (components.go), each
	// nil while its setting is off.
	ejector Kept[config.Ejection, *health.Ejector]
	bw      Kept[config.Bandwidth, *Paced]
	top     Kept[int, *topk.ClientTop]
	// guard is the backend_limits guard (nil while off). Not a Kept, as
	// the checker: its 80-byte key would sit in every App, stored ones
	// too; it is kept with the guard, on the heap only while it is on.
	guard *keptGuard
	// checker is the health checker (nil while checks are off). Not a
	// Kept: its key, the settings and the leg, would sit in every App,
	// stored ones too; it is kept with the checker, on the heap only
	// while checks are on.
	checker *legChecker
	// stored: loaded from the catalog (not the config file); storedRefs
	// counts the catalog's routes composed for it, the last of which
	// releases it.
	stored     bool
	storedRefs int32 // int32 beside the bool: App stays in the 352-byte size class
}

// Route is one app as composed for one config: what the request path runs.
type Route struct {
	// Gate is the app's limits: shape, rate, body, concurrency and its
	// queue, priorities, fair share, shadow.
	Gate  limits.Gate
	App   *App
	Pool  *forward.Pool
	Top   *topk.ClientTop // the app's heavy hitters; nil when off
	Guard *protect.Guard  // backend_limits; nil when off
}

// NewTable returns an empty table; give it a config (SetConfig) before
// composing, and Close it when done.
func NewTable(o Options) *Table {
	t := &Table{o: o, apps: map[string]*App{}}
	t.cluster = t.newCluster(o.Cluster)
	t.upstreams.Unclean.Log = func(reason, addr string) {
		if l, ok := o.ErrorLog.Take(slog.LevelWarn, observe.EventBackendUnclean, ""); ok {
			l.Log("reason", reason, "backend", addr)
		}
	}
	o.Metrics.BackendUnclean(forward.UncleanReasons[:], t.upstreams.Unclean.Count)
	o.Metrics.BackendConns(func(f func(string, observe.ConnCounts)) {
		t.upstreams.Each(func(p *forward.Upstream) { f(p.Addr(), p.Counts()) })
	})
	o.Metrics.UpgradeStateDropped(t.PendingDropped)
	t.scale.Init()
	t.overload = overloadWatch{sampler: o.Sampler, mon: overload.NewMonitor()}
	return t
}

// Views are the apps serving and the scale, as the admin API and the
// metrics collector read them.
func (t *Table) Views() *Views { return &t.views }

// Upstreams are the connection pools the apps share, by backend address.
func (t *Table) Upstreams() *forward.Upstreams { return &t.upstreams }

// ReleaseConns gives back pools that Compose, Applied or Release returned,
// once no new route uses them: the last app to give one back closes its
// idle connections.
func (t *Table) ReleaseConns(conns []*forward.Upstream) {
	for _, c := range conns {
		t.upstreams.Release(c)
	}
}

// SetConfig starts a reload (or the first load) of cfg, which must have
// passed Validate: the scale takes its strict fraction; apps are then
// composed (Compose) and the reload ended (Applied).
func (t *Table) SetConfig(cfg *config.Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cfg = cfg
	t.scale.SetConfig(cfg)
}

// Compose builds the route of app name for the config given to SetConfig,
// creating or updating the app's state that outlives reloads; stored says
// ac was loaded from the catalog store (a file app of the same name wins:
// the caller checks). It returns the connection pools the app's previous
// route used, for the caller to give back (ReleaseConns) once the new
// route is published.
func (t *Table) Compose(name string, ac *config.App, trust forward.Trust, stored bool) (Route, []*forward.Upstream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cfg, now := t.cfg, t.o.Clock.Now()
	a := t.apps[name]
	if a == nil {
		if a, _ = t.parked.Take(name, now, (*App).forgetLimits); a != nil {
			a.Metrics = t.o.Metrics.App(name) // forgotten when it was parked
			t.apps[name] = a
		}
	}
	lim := limitsconf.AdmitLimits(ac.Limits)
	fresh := a == nil
	if fresh {
		a = &App{Name: name, limiter: admit.NewLimiter(lim, t.o.Clock), Metrics: t.o.Metrics.App(name), alert: new(atomic.Bool)}
		t.apps[name] = a
	}
	a.rate = limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst)
	a.clientRate = limitsconf.GCRA(ac.Limits.Client.Rate, ac.Limits.Client.Burst)
	a.settle, a.imbalanceAlert = Settle(ac), ac.Balance.ImbalanceAlert
	if stored {
		a.stored = true
		a.storedRefs++
	} else {
		a.stored = false // a file app now has the name of a stored one: the file wins
	}
	t.applyConcurrency(a, ac.Limits.Concurrency, lim)
	// The new route takes the pools of its backends before the old one's
	// are given back, so a pool both use stays open.
	retired := a.dropConns()
	a.conns = make([]*forward.Upstream, len(ac.Backends))
	for i, b := range ac.Backends {
		a.conns[i] = t.upstreams.AcquireLeg(b.Addr, cfg.Upstream, ac.Upstreams())
	}
	a.ejector.Apply(ac.Ejection, func(c config.Ejection) *health.Ejector {
		return NewEjector(c, t.o.Logger.With("app", name))
	}, nil)
	bw := t.applyBandwidth(a, ac.Limits.Bandwidth)
	rt := Route{App: a, Pool: forward.NewPool(forward.Options{
		App: name, Backends: ac.Backends, Conns: a.conns, Trust: trust,
		ErrorLog: t.o.ErrorLog, Metrics: a.Metrics, Upstream: cfg.Upstream,
		OnReject: a.Metrics.Rejected,
		Balance:  ac.Balance, Prev: a.backends, Outcomes: a.outcomes(),
		Bandwidth: bw,
		Retry:     ac.Retry, Clock: t.o.Clock,
		Buffers: t.o.Buffers, ResponseBuffer: int64(ac.Limits.ResponseBuffer),
		Spill: t.o.Spill, ResponseSpill: int64(ac.Limits.ResponseSpill),
		MinRate: MinRate(cfg.Server), WriteTimeout: cfg.Server.WriteTimeout.D(),
		Deadline: ac.Upstreams().Deadline,
	})}
	a.backends = rt.Pool.Set()
	if e := a.ejector.v; e != nil {
		e.Retain(a.backends)
	}
	up := ac.Upstreams()
	leg := up.Leg()
	if c := a.checker; c != nil && (c.health != ac.Health || c.leg != leg) {
		stopChecker(c) // new settings, or probes must speak a new leg
		a.checker = nil
	}
	if a.checker == nil {
		a.checker = t.newChecker(a, ac.Health, up, leg)
	}
	if c := a.checker; c != nil {
		c.Update(a.backends)
	}
	if a.window == nil {
		a.window = balance.NewWindow(DistributionWindow)
		a.window.Observe(a.backends, now) // the window's first mark: shares count from here
	}
	rt.Gate = limits.Gate{
		AppRate:    limits.NewRule(name, reply.Rate, a.rate),
		ClientRate: limits.NewRule(name+"-client", reply.ClientRate, a.clientRate),
		RateFactor: t.scale.RateFactor(),
		ClientKey:  clientkey.New(ac.Limits.Client.Key),
		Classes:    limitsconf.Classifier(ac.Limits.Priority),
		FairShare:  ac.Limits.FairShare,
		Shapes:     limitsconf.Shapes(&t.shapes, ac.Limits),
		Shadow:     limits.NewShadowSet(ac.Limits.Shadow),
		Limiter:    a.limiter,
		Adaptive:   a.adaptive,
		Count:      a.Metrics,
		Clock:      t.o.Clock,
	}
	a.rates.Apply(&rt.Gate, t.cluster, name, ac.Limits.Client.MaxKeys)
	rt.Guard = t.applyGuard(a, GuardKey{Config: ac.BackendLimits, Wait: lim, Strict: t.scale.Strict()})
	rt.Gate.ReadClient = rt.Guard != nil
	rt.Top = a.top.Apply(ac.Limits.Client.TopK, topk.NewClientTop, nil)
	t.takeOverLocked(a, fresh, now)
	t.views.Publish(&View{Name: name, Hosts: ac.Hosts, Stored: a.stored, Limiter: a.limiter,
		Conf: a.conf, Metrics: a.Metrics, Top: rt.Top, Guard: rt.Guard, Window: a.window,
		Set: a.backends, Alert: a.alert, Adaptive: a.adaptive, Bandwidth: bw, Conns: a.conns,
		Rate: ac.Limits.Rate.PerSecond(), ClientRate: ac.Limits.Client.Rate.PerSecond()})
	return rt, retired
}

// Applied ends a reload of the config given to SetConfig: the scale is
// published and the apps of the config file that it no longer has are
// retired. It returns their connection pools, for the caller to give back.
func (t *Table) Applied() []*forward.Upstream {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.views.PublishScale(t.scale.View())
	var retired []*forward.Upstream
	for name, a := range t.apps {
		if _, ok := t.cfg.Apps[name]; !ok && !a.stored {
			retired = append(retired, t.retire(a, false)...)
		}
	}
	return retired
}

// Release drops one route of a stored app (the catalog evicted or
// replaced it); the last one retires the app to the parked apps. It
// returns the pools the app held, for the caller to give back.
func (t *Table) Release(a *App) []*forward.Upstream {
	t.mu.Lock()
	defer t.mu.Unlock()
	a.storedRefs--
	if a.storedRefs > 0 || !a.stored || t.apps[a.Name] != a {
		return nil
	}
	return t.retire(a, true)
}

// retire takes app a out of service, the one way an app is torn down: it
// leaves the apps and the admin API, its health checks stop and its
// metrics are forgotten; the connection pools it held are returned, for
// the caller to give back once no new route uses them. A parked app (a
// stored app the catalog evicted) keeps its limits' state until they
// settle (Parked); otherwise that state goes now. Requests still on a
// route of a finish on it. Callers hold t.mu.
func (t *Table) retire(a *App, park bool) []*forward.Upstream {
	delete(t.apps, a.Name)
	t.views.Unpublish(a.Name)
	a.Metrics.Forget()
	stopChecker(a.checker) // a recomposed app starts its checks again
	a.checker = nil
	if park {
		t.parked.Park(a.Name, a, t.o.Clock.Now().Add(a.settle), t.cfg.Catalog.Cache.MaxApps, (*App).forgetLimits)
	} else {
		a.forgetLimits()
	}
	return a.dropConns()
}

// forgetLimits drops the limits' state a's limiters keep outside this
// process (the cluster's rate store and bandwidth share).
func (a *App) forgetLimits() {
	a.rates.Forget()
	a.bw.Reset((*Paced).Forget)
}

// dropConns takes the app's connection pools away from it.
func (a *App) dropConns() []*forward.Upstream {
	out := a.conns
	a.conns = nil
	return out
}

// applyConcurrency sets an app's limiter: a static limit, or an adaptive
// one that keeps what it learnt across reloads unless its bounds change.
// The limiter gets the limits scaled by the factor now; a.conf keeps them
// as configured for the next change of factor.
func (t *Table) applyConcurrency(a *App, c config.Concurrency, lim admit.Limits) {
	a.conf = lim
	f := t.scale.LimitFactor()
	if c.Adaptive != config.AdaptiveGradient {
		a.adaptive = nil
		a.limiter.SetLimits(ScaleLimits(lim, f))
		return
	}
	if a.adaptive != nil && a.adaptive.Config() == limitsconf.Gradient(c) {
		a.adaptive.SetBase(lim, f)
		return
	}
	a.adaptive = limits.NewAdaptive(limitsconf.Gradient(c), lim, a.limiter, f)
}

// applyBandwidth makes, keeps or drops an app's bandwidth limiter. A new
// one is made only when limits.bandwidth changes; a new scale (the strict
// fraction) changes its rate in place.
func (t *Table) applyBandwidth(a *App, cfg config.Bandwidth) *bandwidth.Limiter {
	p := a.bw.Apply(cfg, func(cfg config.Bandwidth) *Paced {
		return NewPaced(a.Name, cfg, &t.scale, t.cluster, t.o.Clock)
	}, (*Paced).Forget)
	if p == nil {
		return nil
	}
	p.SetRate(t.scale.BandwidthRate(int64(cfg.Rate)))
	return p.Limiter()
}

// keptGuard is an app's backend_limits guard with the key it was made
// from.
type keptGuard struct {
	key GuardKey
	g   *protect.Guard
}

// applyGuard makes, keeps or drops a's backend_limits guard for k, by
// Kept's rule: the guard made from k is kept while k stays the same.
func (t *Table) applyGuard(a *App, k GuardKey) *protect.Guard {
	if a.guard != nil && a.guard.key == k {
		return a.guard.g
	}
	a.guard = nil
	g := NewGuard(k, t.o.Clock)
	if g != nil {
		a.guard = &keptGuard{key: k, g: g}
	}
	return g
}

// backendGuard is a's backend_limits guard, nil while off.
func (a *App) backendGuard() *protect.Guard {
	if a.guard == nil {
		return nil
	}
	return a.guard.g
}

// outcomes is what the app's pool reports finished requests to.
func (a *App) outcomes() forward.OutcomeObserver {
	if a.ejector.v == nil {
		return nil
	}
	return a.ejector.v
}

// legChecker is an app's health checker with the settings it was made
// from and the leg (protocol, TLS) its probes speak: a reload that changes
// either makes a new one, one that changes neither keeps it.
type legChecker struct {
	*health.Checker
	health config.Health
	leg    config.Leg
}

// newChecker makes a's health checker for leg (nil when checks are off),
// started only once StartChecks has run (else StartChecks starts it).
func (t *Table) newChecker(a *App, cfg config.Health, up config.AppUpstream, leg config.Leg) *legChecker {
	c := NewChecker(a.backends, cfg, up, t.o.Clock, t.o.Logger.With("app", a.Name))
	if c == nil {
		return nil
	}
	if t.checks != nil {
		if err := c.Start(t.checks); err != nil { // a new checker: a broken invariant
			panic(fmt.Sprintf("apps: health: %v", err))
		}
	}
	return &legChecker{Checker: c, health: cfg, leg: leg}
}

// stopChecker ends a health checker's goroutine; nil does nothing.
func stopChecker(c *legChecker) {
	if c != nil {
		c.Stop()
	}
}

// StartChecks starts every app's health checker, and those of apps
// composed from now on: the server calls it as it starts serving, so that
// building a server starts no goroutine.
func (t *Table) StartChecks() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.checks != nil {
		return
	}
	t.checks, t.stopChecks = context.WithCancel(context.Background())
	for _, a := range t.apps {
		if c := a.checker; c != nil {
			c.Start(t.checks) // never started: composing starts none before StartChecks
		}
	}
}

// StopChecks ends every health checker and waits for each to return; a
// checker made later (an app composed during shutdown) ends at once.
// Safe without StartChecks (then none runs), and twice.
func (t *Table) StopChecks() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopChecks != nil {
		t.stopChecks()
	}
	for _, a := range t.apps {
		stopChecker(a.checker)
	}
}

// Sweep drops every app's idle rate limit state at the clock's now, and
// the state handed over for apps not composed that has settled since.
func (t *Table) Sweep() {
	now := t.o.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.apps {
		a.rates.Sweep(now)
	}
	t.pending.Sweep(now, t.dropPending)
}

// MinRate is server.min_rate, as the body readers take it.
func MinRate(sc config.Server) netlimit.MinRate {
	return netlimit.MinRate{Rate: int64(sc.MinRate), Grace: sc.MinRateGrace.D()}
}
