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
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/sni"
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
	// Catalog is the store of catalog.sqlite or catalog.postgres, opened
	// by the caller (who closes it after Serve); nil when the config has
	// no catalog.
	Catalog catalog.Store
	// AccessLog is where log.access lines go (a JSON handler: one object
	// per line); nil: a JSON handler over LogOutput if set, else Logger's
	// handler. Only that first never blocks by construction, so only with
	// it do the event loops write the lines of the requests they answer
	// (loopEngine.front); with another, such requests go to a worker.
	AccessLog slog.Handler
	// LogOutput, when set, is the bounded writer behind the loggers, owned
	// by the caller; its drops are exported as levee_log_dropped_total.
	LogOutput *observe.LogWriter
	// Listen, when set, opens each listener's socket in place of
	// net.Listen: for tests that shape the connections levee accepts
	// (their socket buffers).
	Listen func(network, address string) (net.Listener, error)
	// ACME, when set, obtains certificates for apps with tls: acme (see
	// acme.go); the caller starts it after Listen and closes it after Serve.
	ACME *acme.Manager
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
	// accessQueued: the access log writes into LogOutput's bounded queue,
	// which never blocks (it drops, counted, when full).
	accessQueued bool
	// unrouted counts requests no app claims, under app="".
	unrouted *observe.AppMetrics
	// peers watches the clients of waiting fasthttp requests (netlimit.PeerCtx).
	peers netlimit.PeerWatch
	// body is how every request body is paced and timed (bodyPace).
	body bodyPace

	// current is what the request path reads: one atomic load per request.
	current atomic.Pointer[snapshot]

	mu    sync.Mutex // serialises reloads; guards cfg and trust
	cfg   *config.Config
	trust forward.Trust
	// apps is the state of the apps that outlives reloads: composition,
	// parking, the limit scale, the views the admin API reads.
	apps *apps.Table

	// lazy is the catalog (SQLite or PostgreSQL), looked up when the
	// config file's apps miss (nil when off); fixed for the server's life.
	lazy         *catalog.Lazy[*route]
	catalogRetry time.Duration
	acme         *acme.Manager // nil when tls.acme is off

	listen    func(network, address string) (net.Listener, error) // Options.Listen
	listeners []*listener
	serving   sync.WaitGroup

	// buffers is server.buffer_memory: every request and response buffer
	// is charged to it.
	buffers *membuf.Budget
	// spill is server.spill: every response held on disk is charged to it.
	spill *spill.Budget

	// released: Close, or the end of Serve, has given back what New and
	// Listen took.
	released sync.Once

	// certs is the TLS listeners' certificate choice.
	certs *sni.Chooser

	// exporter sends the spans of traced requests; Serve runs it. refusals
	// is the tracing.refusals_per_second bucket (guarded by mu).
	exporter *trace.Exporter
	refusals apps.Kept[int, *trace.RefusalLimiter]

	// draining is set once Serve has begun its drain (draining.go).
	draining atomic.Bool
}

// snapshot is one config's routing table, immutable once published.
type snapshot struct {
	cfg     *config.Config
	loaded  time.Time // when cfg was put in force
	catalog catalog.Catalog[*route]
	access  observe.AccessSample // log.access: which requests are logged
	trust   forward.Trust
	tracer  *tracer   // nil: tracing off
	certs   sni.Table // the config file's hosts' certificates
}

// route is an app as composed for one config: every request path step in order.
type route struct {
	// Gate is the app's limits: shape, rate, body, concurrency and its
	// queue, priorities, fair share, shadow (package limits, the one
	// implementation the admission middleware applies too).
	limits.Gate
	app   *apps.App
	pool  *forward.Pool
	top   *topk.ClientTop // the app's heavy hitters; nil when off
	guard *protect.Guard  // backend_limits; nil when off
	body  bodyRead        // how the request body is read before admission
	cert  sni.Cert        // apps.NAME.tls, for the TLS listeners' SNI
	// inLoop: the event loop may run the route's first steps
	// (loopEngine.front): its rates are decided in process, without a wait.
	inLoop bool
	// loopForward: the event loop may forward the route's simple requests
	// itself, when their slot is free (forwardInLoop).
	loopForward bool
}

// bodyRead is how a route reads a request body ahead of admission:
// limits.request_buffer. The pace and the timeout (server.min_rate,
// server.read_timeout) are the server's (Server.body), the same for every
// route: a stored app is kept under 4 KB of heap, and the route sits just
// under a size class.
type bodyRead struct {
	ahead int64
}

// bodyPace is server.min_rate and server.read_timeout, which every
// request body is read at; fixed for the server's life (a change needs a
// restart: config.Reloadable).
type bodyPace struct {
	rate    netlimit.MinRate
	timeout time.Duration
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
	s := &Server{log: o.Logger, level: o.LogLevel, clk: o.Clock, listen: o.Listen,
		body: bodyPace{rate: apps.MinRate(cfg.Server), timeout: cfg.Server.ReadTimeout.D()}}
	s.metrics = observe.NewMetrics(s)
	s.metrics.SetClock(s.clk)
	s.errlog = s.metrics.ErrorLog(s.log, errorLimits(cfg.Log))
	switch {
	case o.AccessLog != nil:
	case o.LogOutput != nil:
		o.AccessLog, s.accessQueued = slog.NewJSONHandler(o.LogOutput, nil), true
	default:
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
	s.exporter = trace.NewExporter(trace.ExporterOptions{})
	s.metrics.TraceSpans(s.exporter.Stats)
	s.apps = apps.NewTable(apps.Options{Clock: s.clk, Logger: s.log, ErrorLog: s.errlog, Metrics: s.metrics,
		Buffers: s.buffers, Spill: s.spill, Cluster: cfg.Cluster, Sampler: o.Sampler})
	s.apply(cfg)
	s.lazy = s.newLazyCatalog(o.Catalog, cfg.Catalog)
	s.catalogRetry = cfg.Catalog.Loader.RetryAfter.D()
	s.setupCerts(o.ACME)
	return s
}

// Table is the state of the apps that outlives reloads; an upgrade hands
// its limits' state over (apps.Table.ExportState, ImportState, Report).
func (s *Server) Table() *apps.Table { return s.apps }

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
	if err := config.Reloadable(s.cfg, cfg); err != nil {
		s.mu.Unlock()
		s.metrics.Reload(false)
		return err
	}
	s.applyLocked(cfg)
	s.mu.Unlock()
	if s.acme != nil {
		s.acme.Reload(cfg)
	}
	if s.lazy != nil {
		// The catalog's cached apps compose again on the new config (its
		// composer takes s.mu); a file app now named like one drops it.
		s.lazy.Refresh()
	}
	s.metrics.Reload(true)
	return nil
}

func (s *Server) apply(cfg *config.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLocked(cfg)
}

func (s *Server) applyLocked(cfg *config.Config) {
	if s.level != nil {
		s.level.Set(cfg.Log.SlogLevel())
	}
	s.errlog.SetLimits(errorLimits(cfg.Log))
	s.buffers.SetMax(int64(cfg.Server.BufferMemory))
	s.apps.SetConfig(cfg)
	trust := forward.NewTrust(cfg.Server.TrustedPrefixes())
	s.trust = trust
	entries := make([]catalog.Entry[*route], 0, len(cfg.Apps))
	var retired []*forward.Upstream
	for _, name := range cfg.AppNames() {
		ac := cfg.Apps[name]
		rt, old := s.composeApp(name, ac, cfg, trust, false)
		retired = append(retired, old...)
		entries = append(entries, catalog.Entry[*route]{Hosts: ac.Hosts, Paths: ac.Paths, Value: rt})
	}
	s.current.Store(&snapshot{catalog: catalog.Build(entries), access: observe.NewAccessSample(cfg.Log.Access.Sample), trust: trust,
		cfg: cfg, loaded: s.clk.Now(), tracer: s.applyTracing(cfg.Tracing), certs: sni.NewTable(cfg)})
	retired = append(retired, s.apps.Applied()...)
	// Pools no app uses any more close their idle connections now; those
	// in use finish their requests.
	s.apps.ReleaseConns(retired)
	s.cfg = cfg
}

// composeApp builds the route of app name for cfg: the app's part is its
// Table's (apps.Table.Compose), the engines' part (the body's read ahead,
// the certificate) the server's. It returns the connection pools the
// app's previous route used, to be released (apps.Table.ReleaseConns) once the new
// snapshot is published.
func (s *Server) composeApp(name string, ac *config.App, cfg *config.Config, trust forward.Trust, stored bool) (*route, []*forward.Upstream) {
	c, retired := s.apps.Compose(name, ac, trust, stored)
	return &route{Gate: c.Gate, app: c.App, pool: c.Pool, top: c.Top, guard: c.Guard, cert: sni.NewCert(ac),
		body:   bodyRead{ahead: int64(ac.Limits.RequestBuffer)},
		inLoop: c.Gate.Local(), loopForward: c.Gate.Local() && c.Guard == nil &&
			c.Gate.Shadow&limits.BatchShadows == 0 && c.Pool.ForwardsFromLoop()}, retired
}

// Listen binds every configured listener. It returns an error, and binds
// nothing, if any address cannot be bound.
func (s *Server) Listen() error {
	cfg := s.Config()
	if err := s.spill.Check(); err != nil {
		return fmt.Errorf("server: server.spill.dir: %w", err)
	}
	var bound []*listener
	for i, lc := range cfg.Listen {
		ln, err := s.listen("tcp", lc.Addr)
		var l *listener
		if err == nil {
			if l, err = s.newListener(cfg, i, ln); err != nil {
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
	s.apps.StartChecks()
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
	background.Go(func() { s.apps.Run(bgCtx.Done()) }) // rate sweeps, distribution, overload
	background.Go(func() { clock.Every(s.clk, bgCtx.Done(), logSweepEvery, s.errlog.Sweep) })
	if c := s.apps.Cluster(); c != nil {
		background.Go(func() { c.Run(bgCtx) }) // the heartbeat
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
	s.draining.Store(true)
	stopBackground()
	stopWatch()
	// Everything below ends by the drain deadline: SIGTERM always finishes,
	// even with the catalog's store stuck on a hung filesystem (a goroutine
	// stuck there is left to the process's exit, and logged).
	drain, cancel := context.WithTimeout(context.Background(), s.Config().Server.DrainTimeout.D())
	defer cancel()
	s.waitOrLog(drain, "background work (the catalog's watch)", background.Wait)
	s.apps.StopChecks()
	err := s.shutdown(drain)
	s.serving.Wait()
	s.peers.Wait() // its loop ends at the first tick without a waiting request
	stopExport()
	s.waitOrLog(drain, "the last trace export", exporting.Wait)
	var closeErr error
	s.released.Do(func() {
		if s.lazy != nil {
			// Releases every stored app: no request is left to use one.
			s.waitOrLog(drain, "the catalog's loads", s.lazy.Close)
		}
		closeErr = s.apps.Close()
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
		s.apps.StopChecks()
		if s.lazy != nil {
			s.lazy.Close()
		}
		s.apps.Upstreams().CloseIdle()
		err = s.apps.Close()
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

func (s *Server) shutdown(ctx context.Context) error {
	start := s.clk.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(s.listeners))
	for i, l := range s.listeners {
		wg.Go(func() { errs[i] = l.shutdown(ctx) })
	}
	wg.Wait()
	s.apps.Upstreams().CloseIdle()
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

// logSweepEvery is how often the error log's quiet keys are summed up
// (observe.ErrorLog.Sweep).
const logSweepEvery = time.Second
