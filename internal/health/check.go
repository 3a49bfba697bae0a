package health

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/clock"
)

// Defaults of [Check], applied by [Check.WithDefaults].
const (
	DefaultPath        = "/healthz"
	DefaultInterval    = 5 * time.Second
	DefaultTimeout     = 1 * time.Second
	DefaultHealthy     = 2
	DefaultUnhealthy   = 3
	DefaultConcurrency = 8
)

// Check configures active health checks. A zero field takes its default (see
// WithDefaults); a bad one is an error (see Validate).
type Check struct {
	Path      string        // probed path, starting with "/"; default /healthz
	Interval  time.Duration // from the end of one round to the start of the next; default 5s
	Timeout   time.Duration // deadline of each probe; default 1s
	Healthy   int           // passed probes in a row that mark an unhealthy backend healthy; default 2
	Unhealthy int           // failed probes in a row that mark a healthy backend unhealthy; default 3
	// Protocol is what the backends speak (the app's upstream leg): the
	// default prober probes with it.
	Protocol Protocol
	// GRPC probes with the gRPC health call (grpc.health.v1.Health/Check)
	// for Service ("" is the whole server) instead of a GET of Path; it
	// needs an HTTP/2 Protocol.
	GRPC    bool
	Service string
}

// Protocol is how the default prober reaches a backend: as the app's
// leg does (apps.NAME.upstream.protocol).
type Protocol uint8

// The protocols.
const (
	HTTP1 Protocol = iota // HTTP/1.1 (HTTPProber)
	H2C                   // HTTP/2 with prior knowledge (H2Prober)
	H2                    // HTTP/2 on TLS, ALPN h2 (H2Prober with CheckerOptions.TLS)
)

func (p Protocol) String() string {
	switch p {
	case HTTP1:
		return "http1"
	case H2C:
		return "h2c"
	case H2:
		return "h2"
	}
	return fmt.Sprintf("protocol(%d)", p)
}

// WithDefaults returns c with every zero field set to its default.
func (c Check) WithDefaults() Check {
	c.Path = cmp.Or(c.Path, DefaultPath)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Healthy = cmp.Or(c.Healthy, DefaultHealthy)
	c.Unhealthy = cmp.Or(c.Unhealthy, DefaultUnhealthy)
	return c
}

// Validate reports every field no checker can honour. It never replaces a
// value; call it after WithDefaults.
func (c Check) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.Path, "/") {
		errs = append(errs, fmt.Errorf("health: health.path: must start with / (got %q)", c.Path))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("health: health.interval: must be > 0 (got %v)", c.Interval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("health: health.timeout: must be > 0 (got %v)", c.Timeout))
	}
	if c.Healthy < 1 {
		errs = append(errs, fmt.Errorf("health: health.healthy: must be ≥ 1 (got %d)", c.Healthy))
	}
	if c.Unhealthy < 1 {
		errs = append(errs, fmt.Errorf("health: health.unhealthy: must be ≥ 1 (got %d)", c.Unhealthy))
	}
	if c.Protocol > H2 {
		errs = append(errs, fmt.Errorf("health: protocol: unknown %v", c.Protocol))
	}
	if c.GRPC && c.Protocol == HTTP1 {
		errs = append(errs, errors.New("health: health.grpc: needs an HTTP/2 protocol, h2c or h2 (got http1)"))
	}
	if c.Service != "" && !c.GRPC {
		errs = append(errs, errors.New("health: health.service: only with health.grpc"))
	}
	return errors.Join(errs...)
}

// CheckerOptions are the optional collaborators of a Checker.
type CheckerOptions struct {
	// Clock times the rounds; nil is clock.Real.
	Clock clock.Clock
	// Prober probes one backend; nil is the prober of cfg.Protocol, which
	// the Checker closes when it stops: NewHTTPProber(cfg.Timeout) for
	// HTTP1, an H2Prober for H2C and H2 (and for GRPC).
	Prober Prober
	// TLS is the TLS client of the H2 protocol for a backend at host (the
	// leg's, so that probes verify as requests do); nil verifies against
	// the system's roots.
	TLS func(host string) *tls.Config
	// Logger receives one record per health change; nil discards.
	Logger *slog.Logger
	// Concurrency bounds the probes in flight in one round; 0 is 8.
	Concurrency int
	// OnChange, if set, is called on each health change (for metrics) from
	// the Checker's goroutine, after the backend was updated.
	OnChange func(id string, healthy bool)
}

// Status is one backend's active health as the Checker sees it.
type Status struct {
	ID        string
	Healthy   bool
	Successes int   // passed probes in a row
	Failures  int   // failed probes in a row
	LastError error // of the last failed probe; nil if the last probe passed
}

// Checker probes every backend of a Set each Interval from one goroutine,
// started by Start and ended by Stop or the cancellation of Start's context.
// A round probes all backends, at most Concurrency at a time, each within
// Timeout; the first round starts at once, the next one Interval after the
// previous ended. After Unhealthy failed probes in a row a healthy backend
// gets SetHealthy(false); after Healthy passed probes in a row an unhealthy
// one gets SetHealthy(true). A round cut short by Stop changes nothing.
//
// Update swaps the Set (after a reload) for the next round; the probe run
// and verdict of each backend ID carry over. Probe deadlines are wall-clock
// (they bound network I/O); only the interval uses the injected Clock.
// All methods are safe for concurrent use.
type Checker struct {
	cfg      Check
	clock    clock.Clock
	prober   Prober
	closer   func() // closes an owned prober's idle connections; nil if not owned
	log      *slog.Logger
	limit    int
	onChange func(id string, healthy bool)

	set atomic.Pointer[balance.Set] // nil: nothing to check

	mu      sync.Mutex
	states  map[string]*checkState // by backend ID; guarded by mu
	rounds  uint64                 // completed rounds; guarded by mu
	started bool                   // guarded by mu
	cancel  context.CancelFunc     // guarded by mu; nil before Start
	done    chan struct{}          // closed when the goroutine returns; guarded by mu
}

type checkState struct {
	backend   *balance.Backend // the object last given the verdict
	healthy   bool
	successes int
	failures  int
	lastErr   error
	seen      uint64 // round that last counted it (duplicates count once)
}

type change struct {
	id      string
	healthy bool
	n       int // the run that decided it
	err     error
}

// NewChecker returns a Checker of set (nil: none until Update) for cfg after
// WithDefaults, or the error of Validate. It does not start it.
func NewChecker(set *balance.Set, cfg Check, opts CheckerOptions) (*Checker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("health: concurrency: must be ≥ 0 (got %d)", opts.Concurrency)
	}
	c := &Checker{cfg: cfg, clock: opts.Clock, prober: opts.Prober, log: opts.Logger,
		limit: opts.Concurrency, onChange: opts.OnChange, states: map[string]*checkState{}}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.prober == nil {
		c.prober, c.closer = newProber(cfg, opts.TLS)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.limit == 0 {
		c.limit = DefaultConcurrency
	}
	c.set.Store(set)
	return c, nil
}

// newProber is the prober of cfg's protocol, and what closes it.
func newProber(cfg Check, tc func(host string) *tls.Config) (Prober, func()) {
	if cfg.Protocol == HTTP1 {
		p := NewHTTPProber(cfg.Timeout)
		return p, p.CloseIdleConnections
	}
	o := H2Options{Timeout: cfg.Timeout, GRPC: cfg.GRPC, Service: cfg.Service,
		// A connection outlives the wait between two probes, so that one
		// serves them all.
		Idle: max(defaultIdle, 2*(cfg.Interval+cfg.Timeout))}
	if cfg.Protocol == H2 {
		o.TLS = tc
		if o.TLS == nil {
			o.TLS = func(host string) *tls.Config {
				return &tls.Config{ServerName: host, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
			}
		}
	}
	p := NewH2Prober(o)
	return p, p.Close
}

// Config returns the configuration in use, defaults applied.
func (c *Checker) Config() Check { return c.cfg }

// Update makes set the Set checked from the next round on; nil checks
// nothing. Backends whose ID is in the previous Set keep their state; if
// NewSet made a new *Backend for a known ID, it is given the known verdict.
func (c *Checker) Update(set *balance.Set) { c.set.Store(set) }

// Start starts the checker's goroutine, which runs until ctx is canceled or
// Stop is called. A Checker starts at most once: a second Start returns an
// error and starts nothing.
func (c *Checker) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("health: checker already started")
	}
	c.started = true
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go c.run(ctx, c.done)
	return nil
}

// Stop cancels the goroutine, including probes in flight, and waits for it
// to return. It does nothing before Start and may be called more than once.
func (c *Checker) Stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (c *Checker) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if c.closer != nil {
		defer c.closer()
	}
	for ctx.Err() == nil {
		c.round(ctx)
		t := c.clock.NewTimer(c.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
}

// round probes every backend of the current Set and applies the results,
// unless ctx ended meanwhile.
func (c *Checker) round(ctx context.Context) {
	set := c.set.Load()
	n := 0
	if set != nil {
		n = set.Len()
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(c.limit, n) {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < n; j = int(next.Add(1) - 1) {
				pctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
				errs[j] = c.prober.Probe(pctx, set.Backend(j).ID(), c.cfg.Path)
				cancel()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for _, ch := range c.apply(set, errs) {
		if ch.healthy {
			c.log.Info("health: backend healthy", "backend", ch.id, "passed", ch.n)
		} else {
			c.log.Warn("health: backend unhealthy", "backend", ch.id, "failed", ch.n, "err", ch.err)
		}
		if c.onChange != nil {
			c.onChange(ch.id, ch.healthy)
		}
	}
}

// apply counts one round's results (errs[j] for backend j of set), updates
// the backends whose verdict changed, forgets IDs no longer in set, and
// returns the changes.
func (c *Checker) apply(set *balance.Set, errs []error) []change {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds++
	var changes []change
	for j, err := range errs {
		b := set.Backend(j)
		st := c.states[b.ID()]
		if st == nil {
			st = &checkState{backend: b, healthy: true}
			c.states[b.ID()] = st
		}
		if st.backend != b { // a new Backend for a known ID: give it the verdict
			st.backend = b
			b.SetHealthy(st.healthy)
		}
		if st.seen == c.rounds {
			continue
		}
		st.seen = c.rounds
		if ch, ok := c.record(st, b, err); ok {
			changes = append(changes, ch)
		}
	}
	for id, st := range c.states {
		if st.seen != c.rounds {
			delete(c.states, id)
		}
	}
	return changes
}

// record counts one probe result and flips b if a threshold is reached.
func (c *Checker) record(st *checkState, b *balance.Backend, err error) (change, bool) {
	if err == nil {
		st.failures, st.lastErr = 0, nil
		st.successes++
		if !st.healthy && st.successes >= c.cfg.Healthy {
			st.healthy = true
			b.SetHealthy(true)
			return change{id: b.ID(), healthy: true, n: st.successes}, true
		}
		return change{}, false
	}
	st.successes, st.lastErr = 0, err
	st.failures++
	if st.healthy && st.failures >= c.cfg.Unhealthy {
		st.healthy = false
		b.SetHealthy(false)
		return change{id: b.ID(), healthy: false, n: st.failures, err: err}, true
	}
	return change{}, false
}

// Status returns the active health of every backend checked in the last
// round, by ID.
func (c *Checker) Status() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.states))
	for id, st := range c.states {
		out = append(out, Status{ID: id, Healthy: st.healthy, Successes: st.successes,
			Failures: st.failures, LastError: st.lastErr})
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.ID, b.ID) })
	return out
}
