// Package server is levee's HTTP edge: it accepts client connections, finds
// each request's app, applies the app's limits, hands admitted requests to
// the app's backends, and swaps whole configs atomically on reload.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/catalog"
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
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/spill"
	"github.com/leveeproxy/levee/internal/topk"
	"github.com/leveeproxy/levee/internal/trace"
)

// Options are a Server's collaborators. Zero values get sensible defaults.
type Options struct {
	Logger *slog.Logger
	// LogLevel, when set, is updated from log.level on every reload.
	LogLevel *slog.LevelVar
	Clock    clock.Clock
	// Sampler reads the host for the overload monitor (overload.enabled);
	// nil means the real host, read from the first enabled sample on.
	Sampler overload.Sampler
	// Catalog is the store of catalog.sqlite, opened by the caller (who
	// closes it after Serve); nil when the config has no catalog.
	Catalog catalog.Store
	// AccessLog is where log.access lines go (a JSON handler: one object
	// per line); nil: Logger's handler.
	AccessLog slog.Handler
	// LogOutput, when set, is the bounded writer behind the loggers, owned
	// by the caller; its drops are exported as levee_log_dropped_total.
	LogOutput *observe.LogWriter
	// Listen, when set, opens each listener's socket in place of
	// net.Listen: for tests that shape the connections levee accepts
	// (their socket buffers).
	Listen func(network, address string) (net.Listener, error)
}

// Server is one levee proxy. Create it with New, bind with Listen, run with
// Serve. Reload may be called at any time from any goroutine.
type Server struct {
	log     *slog.Logger
	level   *slog.LevelVar
	clk     clock.Clock
	metrics *observe.Metrics
	errlog  *observe.ErrorLog
	access  *observe.AccessLog
	// unrouted counts requests no app claims, under app="".
	unrouted *observe.AppMetrics

	// current is what the request path reads: one atomic load per request.
	current atomic.Pointer[snapshot]

	mu    sync.Mutex // serialises reloads; guards cfg, trust and apps
	cfg   *config.Config
	trust forward.Trust
	apps  map[string]*app // state that must outlive a reload, by app name
	// upstreams are the connection pools by backend address, shared by
	// the apps (each holds those of its backends: app.conns).
	upstreams forward.Upstreams
	shapes    limits.ShapeCache

	// lazy is the catalog (SQLite or PostgreSQL), looked up when the config file's apps
	// miss (nil when off); fixed for the server's life.
	lazy         *catalog.Lazy[*route]
	catalogRetry time.Duration
	// parked holds the state of stored apps the catalog evicted, until
	// their limits have settled (apps.Parked); guarded by mu.
	parked apps.Parked[*app]

	listen    func(network, address string) (net.Listener, error) // Options.Listen
	listeners []*listener
	serving   sync.WaitGroup

	// scale is what every app's limits are multiplied by now (an
	// unexpected instance's strict fraction, the overload factor);
	// guarded by mu, but for its rate factor.
	scale apps.Scale
	// overload is the overload monitor, owned by the overload loop.
	overload overloadWatch

	// cluster shares rate limits through Redis; nil unless cluster mode is
	// on. It is fixed for the server's life (cluster changes need a restart).
	cluster *cluster.Cluster

	// buffers is server.buffer_memory: every request and response buffer
	// is charged to it.
	buffers *membuf.Budget
	// spill is server.spill: every response held on disk is charged to it.
	spill *spill.Budget

	// bg is the context of the server's own background work (health
	// checks); stopBg ends it at shutdown.
	bg     context.Context
	stopBg context.CancelFunc
	// started: Serve has begun; health checkers run only from then on
	// (New starts nothing). Guarded by mu.
	started bool
	// released: Close, or the end of Serve, has given back what New and
	// Listen took.
	released sync.Once

	// views are the apps serving and the scale, as the admin API reads
	// them (api.go), published by composeApp and the scale's changes.
	views apps.Views
	// tlsMetrics count the TLS listeners' certificate choices (certs.go).
	tlsMetrics *tlsMetrics

	// exporter sends the spans of traced requests; Serve runs it. refusals
	// is the tracing.refusals_per_second bucket (guarded by mu).
	exporter *trace.Exporter
	refusals kept[int, *trace.RefusalLimiter]
}

// snapshot is one config's routing table, immutable once published.
type snapshot struct {
	cfg     *config.Config
	loaded  time.Time // when cfg was put in force
	catalog catalog.Catalog[*route]
	access  observe.AccessSample // log.access: which requests are logged
	trust   forward.Trust
	tracer  *tracer   // nil: tracing off
	certs   certTable // the config file's hosts' certificates (certs.go)
}

// app is the state of one app that survives reloads: its concurrency limit
// keeps counting requests admitted under the old config, so a reload can
// never let more than the limit through; its connection pool stays warm.
type app struct {
	name    string
	limiter *admit.Limiter
	conf    admit.Limits // as configured; the limiter holds them scaled
	metrics *observe.AppMetrics
	// conns are the shared connection pools of the app's backends, in the
	// order of its last composed route's (see Server.upstreams).
	conns []*forward.Upstream
	// backends is the balancer's backend state (in flight, latency, health),
	// carried into the next config's pool so a reload does not forget it.
	backends *balance.Set
	adaptive *limits.Adaptive // nil for a static concurrency limit
	// ejector takes failing backends out (nil when ejection is off);
	// checker probes them (nil when health checks are off).
	ejector kept[config.Ejection, *health.Ejector]
	checker kept[config.Health, *health.Checker]
	// window measures the backends' shares of requests; alert is whether
	// the imbalance is over its threshold (guarded by Server.mu).
	window *balance.Window
	alert  *atomic.Bool // made with the app; read by the metrics and the API
	// rates holds the app's rate limit state (the app's bucket and one per
	// client, each made when its limit comes on), kept across reloads so a
	// reload never hands out a fresh burst.
	rates apps.Rates
	// bw paces the app's bytes (nil when limits.bandwidth is off).
	bw kept[config.Bandwidth, *apps.Paced]
	// top counts the heaviest clients (nil when limits.client.top_k is 0).
	top kept[int, *topk.ClientTop]
	// guard enforces backend_limits (nil when off); a new one starts with
	// nothing in flight and a full bucket.
	guard kept[apps.GuardKey, *protect.Guard]
	// stored is the config of an app loaded from the catalog (nil
	// for an app of the config file); storedRefs counts the catalog's
	// routes composed for it, the last of which releases it.
	stored     *config.App
	storedRefs int
}

// route is an app as composed for one config: every request path step in order.
type route struct {
	// Gate is the app's limits: shape, rate, body, concurrency and its
	// queue, priorities, fair share, shadow (package limits, the one
	// implementation the admission middleware applies too).
	limits.Gate
	app   *app
	pool  *forward.Pool
	top   *topk.ClientTop // the app's heavy hitters; nil when off
	guard *protect.Guard  // backend_limits; nil when off
	body  bodyRead        // how the request body is read before admission
	cert  routeCert       // apps.NAME.tls, for the TLS listeners' SNI
}

// bodyRead is how a route reads a request body ahead of admission:
// limits.request_buffer, server.min_rate, server.read_timeout.
type bodyRead struct {
	ahead   int64
	rate    netlimit.MinRate
	timeout time.Duration
}

// clientRate is server.min_rate.
func clientRate(sc config.Server) netlimit.MinRate {
	return netlimit.MinRate{Rate: int64(sc.MinRate), Grace: sc.MinRateGrace.D()}
}

// New returns a Server for cfg, which must have passed Validate.
func New(cfg *config.Config, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Listen == nil {
		o.Listen = net.Listen
	}
	s := &Server{log: o.Logger, level: o.LogLevel, clk: o.Clock, listen: o.Listen, apps: map[string]*app{}}
	s.bg, s.stopBg = context.WithCancel(context.Background())
	s.scale.Init()
	s.overload = overloadWatch{sampler: o.Sampler, mon: overload.NewMonitor()}
	s.metrics = observe.NewMetrics(s)
	s.metrics.SetClock(s.clk)
	s.tlsMetrics = newTLSMetrics(s.metrics.Registry)
	s.errlog = s.metrics.ErrorLog(s.log, errorLimits(cfg.Log))
	if o.AccessLog == nil {
		o.AccessLog = o.Logger.Handler()
	}
	s.access = observe.NewAccessLog(o.AccessLog)
	if o.LogOutput != nil {
		s.metrics.LogWriter(o.LogOutput)
	}
	s.unrouted = s.metrics.App("")
	s.buffers = membuf.NewBudget(int64(cfg.Server.BufferMemory))
	s.metrics.Buffers(s.buffers.Used, s.buffers.Max, s.buffers.Short)
	s.spill = spill.NewBudget(cfg.Server.Spill.Dir, int64(cfg.Server.Spill.Budget))
	s.metrics.Spill(s.spill, spill.Reasons[:])
	s.upstreams.Unclean.Log = func(reason, addr string) {
		if l, ok := s.errlog.Take(slog.LevelWarn, observe.EventBackendUnclean, ""); ok {
			l.Log("reason", reason, "backend", addr)
		}
	}
	s.metrics.BackendUnclean(forward.UncleanReasons[:], s.upstreams.Unclean.Count)
	s.metrics.BackendConns(func(f func(string, observe.ConnCounts)) {
		s.upstreams.Each(func(p *forward.Upstream) { f(p.Addr(), p.Counts()) })
	})
	s.exporter = trace.NewExporter(trace.ExporterOptions{})
	s.metrics.TraceSpans(s.exporter.Stats)
	s.cluster = s.newCluster(cfg.Cluster)
	s.apply(cfg)
	s.lazy = s.newLazyCatalog(o.Catalog, cfg.Catalog)
	s.catalogRetry = cfg.Catalog.Loader.RetryAfter.D()
	return s
}

// Metrics returns the server's metrics, for the admin listener.
func (s *Server) Metrics() *observe.Metrics { return s.metrics }

// Config returns the config in force.
func (s *Server) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Reload swaps in cfg (which must have passed Validate) atomically: requests
// already routed finish on the old config, new ones use the new. Settings
// bound to open sockets (listen, admin, server) cannot change without a
// restart; such a config is refused whole and nothing changes.
func (s *Server) Reload(cfg *config.Config) error {
	s.mu.Lock()
	if err := needsRestart(s.cfg, cfg); err != nil {
		s.mu.Unlock()
		s.metrics.Reload(false)
		return err
	}
	s.applyLocked(cfg)
	s.mu.Unlock()
	if s.lazy != nil {
		// The catalog's cached apps compose again on the new config (its
		// composer takes s.mu); a file app now named like one drops it.
		s.lazy.Refresh()
	}
	s.metrics.Reload(true)
	return nil
}

func needsRestart(old, cfg *config.Config) error {
	switch {
	case !reflect.DeepEqual(old.Listen, cfg.Listen):
		return errors.New("reload: listen changed; restart levee to apply it (nothing was changed)")
	case old.Admin != cfg.Admin:
		return errors.New("reload: admin changed; restart levee to apply it (nothing was changed)")
	case !reflect.DeepEqual(old.Server, cfg.Server):
		return errors.New("reload: server settings changed; restart levee to apply them (nothing was changed)")
	case old.Log.Format != cfg.Log.Format:
		return errors.New("reload: log.format changed; restart levee to apply it (nothing was changed)")
	case old.Instance.Lock != cfg.Instance.Lock || old.Instance.Unexpected != cfg.Instance.Unexpected:
		return errors.New("reload: instance.lock or instance.unexpected changed; restart levee to apply them (nothing was changed)")
	case !reflect.DeepEqual(old.Cluster, cfg.Cluster):
		return errors.New("reload: cluster settings changed; restart levee to apply them (nothing was changed)")
	case old.Catalog != cfg.Catalog:
		return errors.New("reload: catalog changed; restart levee to apply it (nothing was changed)")
	}
	return nil
}

func (s *Server) apply(cfg *config.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLocked(cfg)
}

func (s *Server) applyLocked(cfg *config.Config) {
	if s.level != nil {
		s.level.Set(parseLevel(cfg.Log.Level))
	}
	s.errlog.SetLimits(errorLimits(cfg.Log))
	s.buffers.SetMax(int64(cfg.Server.BufferMemory))
	s.scale.SetConfig(cfg)
	trust := forward.NewTrust(cfg.Server.TrustedPrefixes())
	s.trust = trust
	entries := make([]catalog.Entry[*route], 0, len(cfg.Apps))
	var retired []*forward.Upstream
	for _, name := range cfg.AppNames() {
		ac := cfg.Apps[name]
		rt, old := s.composeApp(name, ac, cfg, trust)
		retired = append(retired, old...)
		entries = append(entries, catalog.Entry[*route]{Hosts: ac.Hosts, Paths: ac.Paths, Value: rt})
	}
	s.current.Store(&snapshot{catalog: catalog.Build(entries), access: observe.NewAccessSample(cfg.Log.Access.Sample), trust: trust,
		cfg: cfg, loaded: s.clk.Now(), tracer: s.applyTracing(cfg.Tracing), certs: newCertTable(cfg)})
	s.publishScale()
	for name, a := range s.apps {
		if _, ok := cfg.Apps[name]; !ok && a.stored == nil {
			retired = append(retired, s.retire(a, false)...)
		}
	}
	// Pools no app uses any more close their idle connections now; those
	// in use finish their requests.
	s.releaseConns(retired)
	s.cfg = cfg
}

// composeApp builds the route of app name for cfg, creating or updating the
// app's state that outlives reloads. It returns the connection pools the
// app's previous route used, to be released (releaseConns) once the new
// snapshot is published. Callers hold s.mu.
func (s *Server) composeApp(name string, ac *config.App, cfg *config.Config, trust forward.Trust) (rt *route, retired []*forward.Upstream) {
	a := s.apps[name]
	if a == nil {
		if a, _ = s.parked.Take(name, s.clk.Now(), (*app).forgetLimits); a != nil {
			a.metrics = s.metrics.App(name) // forgotten when it was parked
			s.apps[name] = a
		}
	}
	if a != nil && a.stored != nil && cfg.Apps[name] == ac {
		a.stored = nil // a file app now has the name of a stored one: the file wins
	}
	lim := limitsconf.AdmitLimits(ac.Limits)
	if a == nil {
		a = &app{name: name, limiter: admit.NewLimiter(lim, s.clk), metrics: s.metrics.App(name), alert: new(atomic.Bool)}
		s.apps[name] = a
	}
	s.applyConcurrency(a, ac.Limits.Concurrency, lim)
	// The new route takes the pools of its backends before the old one's
	// are given back, so a pool both use stays open.
	retired = a.dropConns()
	a.conns = make([]*forward.Upstream, len(ac.Backends))
	for i, b := range ac.Backends {
		a.conns[i] = s.upstreams.AcquireLeg(b.Addr, cfg.Upstream, ac.Upstreams())
	}
	s.applyEjection(a, ac.Ejection)
	rt = &route{app: a, pool: forward.NewPool(forward.Options{
		App: name, Backends: ac.Backends, Conns: a.conns, Trust: trust,
		ErrorLog: s.errlog, Metrics: a.metrics, Upstream: cfg.Upstream,
		OnReject: a.metrics.Rejected,
		Balance:  ac.Balance, Prev: a.backends, Outcomes: a.outcomes(),
		Bandwidth: s.applyBandwidth(a, ac.Limits.Bandwidth),
		Retry:     ac.Retry, Clock: s.clk,
		Buffers: s.buffers, ResponseBuffer: int64(ac.Limits.ResponseBuffer),
		Spill: s.spill, ResponseSpill: int64(ac.Limits.ResponseSpill),
		MinRate: clientRate(cfg.Server), WriteTimeout: cfg.Server.WriteTimeout.D(),
		Deadline: ac.Upstreams().Deadline,
	})}
	rt.body = bodyRead{ahead: int64(ac.Limits.RequestBuffer), rate: clientRate(cfg.Server),
		timeout: cfg.Server.ReadTimeout.D()}
	a.backends = rt.pool.Set()
	if a.ejector.v != nil {
		a.ejector.v.Retain(a.backends)
	}
	s.applyHealth(a, ac.Health)
	if a.window == nil {
		a.window = balance.NewWindow(distributionWindow)
		a.window.Observe(a.backends, s.clk.Now()) // the window's first mark: shares count from here
	}
	rt.Gate = limits.Gate{
		AppRate:    limits.NewRule(name, reply.Rate, limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst)),
		ClientRate: limits.NewRule(name+"-client", reply.ClientRate, limitsconf.GCRA(ac.Limits.Client.Rate, ac.Limits.Client.Burst)),
		RateFactor: s.scale.RateFactor(),
		ClientKey:  clientkey.New(ac.Limits.Client.Key),
		Classes:    limitsconf.Classifier(ac.Limits.Priority),
		FairShare:  ac.Limits.FairShare,
		Shapes:     limitsconf.Shapes(&s.shapes, ac.Limits),
		Shadow:     limits.NewShadowSet(ac.Limits.Shadow),
		Limiter:    a.limiter,
		Adaptive:   a.adaptive,
		Count:      a.metrics,
		Clock:      s.clk,
	}
	a.rates.Apply(&rt.Gate, s.cluster, name, ac.Limits.Client.MaxKeys)
	rt.guard = s.applyBackendLimits(a, ac.BackendLimits, lim)
	rt.ReadClient = rt.guard != nil
	rt.top = a.top.apply(ac.Limits.Client.TopK, topk.NewClientTop, nil)
	rt.cert = newRouteCert(ac)
	s.publish(a, ac, rt)
	return rt, retired
}

// retire takes app a out of service, the one way an app is torn down: it
// leaves the apps and the admin API, its health checks stop and its
// metrics are forgotten; the connection pools it held are returned, for
// the caller to release (releaseConns) once no new route uses them. A
// parked app (a stored app the catalog evicted) keeps its limits' state
// until they settle (apps.Parked); otherwise that state goes now. Requests
// still on a route of a finish on it. Callers hold s.mu.
func (s *Server) retire(a *app, park bool) []*forward.Upstream {
	delete(s.apps, a.name)
	s.views.Unpublish(a.name)
	a.metrics.Forget()
	a.checker.reset(stopChecker) // a recomposed app starts its checks again
	if park {
		s.parked.Park(a.name, a, apps.Settled(a.stored, s.clk.Now()), s.cfg.Catalog.Cache.MaxApps, (*app).forgetLimits)
	} else {
		a.forgetLimits()
	}
	return a.dropConns()
}

// forgetLimits drops the limits' state a's limiters keep outside this
// process (the cluster's rate store and bandwidth share).
func (a *app) forgetLimits() {
	a.rates.Forget()
	a.bw.reset((*apps.Paced).Forget)
}

// dropConns takes the app's connection pools away from it, for the caller
// to release (releaseConns) once no new route uses them.
func (a *app) dropConns() []*forward.Upstream {
	out := a.conns
	a.conns = nil
	return out
}

// releaseConns gives back pools taken by composeApp: the last app to give
// one back closes its idle connections.
func (s *Server) releaseConns(conns []*forward.Upstream) {
	for _, c := range conns {
		s.upstreams.Release(c)
	}
}

// applyBackendLimits returns the app's backend_limits guard (nil when off).
func (s *Server) applyBackendLimits(a *app, cfg config.BackendLimits, wait admit.Limits) *protect.Guard {
	return a.guard.apply(apps.GuardKey{Config: cfg, Wait: wait, Strict: s.scale.Strict()},
		func(k apps.GuardKey) *protect.Guard { return apps.NewGuard(k, s.clk) }, nil)
}

// applyConcurrency sets an app's limiter: a static limit, or an adaptive
// one that keeps what it learnt across reloads unless its bounds change.
// The limiter gets the limits scaled by the server's factor now; a.conf
// keeps them as configured for the next change of factor.
func (s *Server) applyConcurrency(a *app, c config.Concurrency, lim admit.Limits) {
	a.conf = lim
	f := s.scale.LimitFactor()
	if c.Adaptive != config.AdaptiveGradient {
		a.adaptive = nil
		a.limiter.SetLimits(apps.ScaleLimits(lim, f))
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
func (s *Server) applyBandwidth(a *app, cfg config.Bandwidth) *bandwidth.Limiter {
	p := a.bw.apply(cfg, func(cfg config.Bandwidth) *apps.Paced {
		return apps.NewPaced(a.name, cfg, &s.scale, s.cluster, s.clk)
	}, (*apps.Paced).Forget)
	if p == nil {
		return nil
	}
	p.SetRate(s.scale.BandwidthRate(int64(cfg.Rate)))
	return p.Limiter()
}

// applyEjection makes, keeps or drops an app's outlier ejector.
func (s *Server) applyEjection(a *app, cfg config.Ejection) {
	a.ejector.apply(cfg, func(cfg config.Ejection) *health.Ejector {
		return apps.NewEjector(cfg, s.log.With("app", a.name))
	}, nil)
}

// outcomes is what the app's pool reports finished requests to.
func (a *app) outcomes() forward.OutcomeObserver {
	if a.ejector.v == nil {
		return nil
	}
	return a.ejector.v
}

// applyHealth starts, updates or stops an app's active health checker.
// Its goroutine belongs to the server and ends at shutdown.
func (s *Server) applyHealth(a *app, cfg config.Health) {
	c := a.checker.apply(cfg, func(cfg config.Health) *health.Checker { return s.newChecker(a, cfg) }, stopChecker)
	if c != nil {
		c.Update(a.backends)
	}
}

// newChecker makes a's health checker (nil when checks are off), started
// only once Serve has begun (else Serve starts it).
func (s *Server) newChecker(a *app, cfg config.Health) *health.Checker {
	c := apps.NewChecker(a.backends, cfg, s.clk, s.log.With("app", a.name))
	if c != nil && s.started {
		if err := c.Start(s.bg); err != nil { // a new checker: a broken invariant
			panic(fmt.Sprintf("server: health: %v", err))
		}
	}
	return c
}

// stopChecker ends a health checker's goroutine; nil does nothing.
func stopChecker(c *health.Checker) {
	if c != nil {
		c.Stop()
	}
}

// Distribution alerts: the imbalance of each app is evaluated every
// distributionEvery over distributionWindow, once it has minAlertRequests.
const (
	distributionEvery  = 10 * time.Second
	distributionWindow = time.Minute
	minAlertRequests   = 100
)

// watchDistribution raises and clears each app's imbalance alert, logging
// once per change, until done; owned by Serve.
func (s *Server) watchDistribution(done <-chan struct{}) {
	s.every(done, distributionEvery, func() { s.checkDistribution(s.clk.Now()) })
}

// checkDistribution evaluates every app's imbalance alert at now.
func (s *Server) checkDistribution(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, a := range s.apps {
		shares, imb := a.window.Observe(a.backends, now)
		var n uint64
		for _, sh := range shares {
			n += sh.Requests
		}
		ac := s.appConfig(name)
		if ac == nil {
			continue
		}
		threshold := ac.Balance.ImbalanceAlert
		alert := n >= minAlertRequests && imb > threshold
		if alert == a.alert.Load() {
			continue
		}
		a.alert.Store(alert)
		if alert {
			s.log.Warn("backend distribution is uneven", "app", name, "imbalance", imb, "threshold", threshold)
		} else {
			s.log.Info("backend distribution is even again", "app", name, "imbalance", imb, "threshold", threshold)
		}
	}
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s)) // validated by config
	return l
}

// Listen binds every configured listener. It returns an error, and binds
// nothing, if any address cannot be bound.
func (s *Server) Listen() error {
	cfg := s.Config()
	if err := s.spill.Check(); err != nil {
		return fmt.Errorf("server: server.spill.dir: %w", err)
	}
	var bound []*listener
	for _, lc := range cfg.Listen {
		ln, err := s.listen("tcp", lc.Addr)
		var l *listener
		if err == nil {
			if l, err = s.newListener(cfg, lc, ln); err != nil {
				ln.Close()
			}
		} else {
			err = fmt.Errorf("server: listen %s: %w", lc.Addr, err)
		}
		if err != nil {
			for _, b := range bound {
				b.close()
			}
			return err
		}
		bound = append(bound, l)
	}
	s.listeners = bound
	return nil
}

// Addrs returns the bound addresses of the listeners, in config order.
func (s *Server) Addrs() []net.Addr {
	out := make([]net.Addr, len(s.listeners))
	for i, l := range s.listeners {
		out[i] = l.ln.Addr()
	}
	return out
}

// Serve serves on the bound listeners until ctx is done, then drains:
// in-flight requests get up to server.drain_timeout to finish. It returns
// the first listener error, or the drain's error, or nil.
//
// The lifecycle, as errgroup states its contract: New builds and starts
// no goroutine; Listen binds; Serve starts every listener and background
// loop (health checks, rate sweeps, the distribution and overload
// watches, the cluster's heartbeat, the catalog's watch, the trace
// exporter) and returns once each has returned, having released what New
// and Listen took. The one exception is work stuck past the drain
// deadline (a catalog store on a hung filesystem): Serve logs it and
// returns, leaving it to the process's exit. Close releases the same
// things for a Server whose Serve never ran. Serve runs at most once.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	s.started = true
	for _, a := range s.apps {
		if a.checker.v != nil {
			a.checker.v.Start(s.bg) // never started: New and apply start none
		}
	}
	s.mu.Unlock()
	errc := make(chan error, len(s.listeners))
	for _, l := range s.listeners {
		s.serving.Go(func() {
			if err := l.serve(); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: %s: %w", l.cfg.Addr, err)
			}
		})
	}
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	var background sync.WaitGroup
	background.Go(func() { s.sweepRates(bgCtx.Done(), rateSweepEvery) })
	background.Go(func() { s.watchDistribution(bgCtx.Done()) })
	background.Go(func() { s.watchOverload(bgCtx.Done()) })
	background.Go(func() { s.sweepLog(bgCtx.Done()) })
	if s.cluster != nil {
		background.Go(func() { s.cluster.Run(bgCtx) }) // the heartbeat
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	if s.lazy != nil {
		background.Go(func() { s.lazy.Run(watchCtx) })
	}
	// The exporter outlives the drain, to send the spans of the requests
	// it finishes.
	exportCtx, stopExport := context.WithCancel(context.Background())
	var exporting sync.WaitGroup
	exporting.Go(func() { s.exporter.Run(exportCtx) })
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopBackground()
	stopWatch()
	// Everything below ends by the drain deadline: SIGTERM always finishes,
	// even with the catalog's store stuck on a hung filesystem (a goroutine
	// stuck there is left to the process's exit, and logged).
	drain, cancel := context.WithTimeout(context.Background(), s.Config().Server.DrainTimeout.D())
	defer cancel()
	s.waitOrLog(drain, "background work (the catalog's watch)", background.Wait)
	s.stopHealthChecks()
	err := s.shutdown(drain)
	s.serving.Wait()
	stopExport()
	s.waitOrLog(drain, "the last trace export", exporting.Wait)
	var closeErr error
	s.released.Do(func() {
		if s.lazy != nil {
			// Releases every stored app: no request is left to use one.
			s.waitOrLog(drain, "the catalog's loads", s.lazy.Close)
		}
		closeErr = s.closeCluster()
	})
	s.errlog.Flush() // what was suppressed, said before the process ends
	return errors.Join(serveErr, err, closeErr)
}

// Close releases what New and Listen took, for a Server whose Serve
// never ran (a start that failed part way): the bound listeners, the
// health checkers, the catalog's loader, the cluster's Redis connections
// and idle backend connections. After Serve has returned it does nothing
// more. It must not be called while Serve runs (end Serve's context
// instead); calling it twice is safe.
func (s *Server) Close() error {
	var err error
	s.released.Do(func() {
		for _, l := range s.listeners {
			l.close()
		}
		s.stopHealthChecks()
		if s.lazy != nil {
			s.lazy.Close()
		}
		s.upstreams.CloseIdle()
		err = s.closeCluster()
	})
	return err
}

// waitOrLog runs wait until it returns or ctx ends; then it logs what was
// left running and returns.
func (s *Server) waitOrLog(ctx context.Context, what string, wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Error("shutdown: gave up waiting at the drain deadline", "for", what)
	}
}

// stopHealthChecks ends every app's health checker and waits for them.
func (s *Server) stopHealthChecks() {
	s.stopBg()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.apps {
		stopChecker(a.checker.v)
	}
}

// rateSweepEvery is how often idle rate limit state is dropped.
const rateSweepEvery = 10 * time.Second

func (s *Server) shutdown(ctx context.Context) error {
	start := s.clk.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(s.listeners))
	for i, l := range s.listeners {
		wg.Go(func() { errs[i] = l.shutdown(ctx) })
	}
	wg.Wait()
	s.upstreams.CloseIdle()
	err := errors.Join(errs...)
	if err != nil {
		s.log.Warn("drain deadline passed; closing remaining connections", "after", s.clk.Now().Sub(start).Round(time.Millisecond))
		for _, l := range s.listeners {
			l.closeAll()
		}
		return fmt.Errorf("server: drain: %w", err)
	}
	return nil
}

// errorLimits are the error log's budgets of lc.
func errorLimits(lc config.Log) observe.ErrorLimits {
	return observe.ErrorLimits{PerSecond: lc.ErrorsPerSecond, PerEvent: lc.ErrorsPerEvent, Interval: lc.ErrorsInterval.D()}
}

// logSweepEvery is how often the error log's quiet keys are summed up.
const logSweepEvery = time.Second

// sweepLog writes the error log's summaries of keys that went quiet, every
// logSweepEvery until done; owned by Serve.
func (s *Server) sweepLog(done <-chan struct{}) { s.every(done, logSweepEvery, s.errlog.Sweep) }
