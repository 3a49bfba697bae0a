package apps

import (
	"fmt"
	"log/slog"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/health"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// The per-app components an app keeps across reloads while the settings
// they were made from stay, each made here from those settings.

// GuardKey is what an app's backend_limits guard is made from: an
// unexpected instance's guard is scaled to its strict fraction.
type GuardKey struct {
	Config config.BackendLimits
	Wait   admit.Limits // the app's queue bounds
	Strict float64
}

// NewGuard makes the backend_limits guard of k (nil when off); a new one
// starts with nothing in flight and a full bucket.
func NewGuard(k GuardKey, clk clock.Clock) *protect.Guard {
	var rate ratelimit.Limit
	if k.Config.Rate != (config.Rate{}) {
		rate = limits.ScaleRate(limitsconf.GCRA(k.Config.Rate, k.Config.Burst), k.Strict)
	}
	inflight := k.Config.Inflight
	if inflight > 0 {
		inflight = limits.ScaleCount(inflight, k.Strict)
	}
	return protect.New(protect.Options{Inflight: inflight, Wait: k.Wait, Rate: rate, Clock: clk})
}

// Paced is an app's bandwidth limiter and the rate it is set to. Guarded
// by its owner's lock.
type Paced struct {
	l    *bandwidth.Limiter
	rate int64 // limits.bandwidth.rate scaled
	// share sets l's rate to this instance's share of rate in cluster
	// mode (nil otherwise): by demand, without rebuilding l.
	share *cluster.Bandwidth
}

// NewPaced makes app's bandwidth limiter for cfg at sc's scale (nil when
// limits.bandwidth is off); in cluster mode (c not nil) its rate is this
// instance's share.
func NewPaced(app string, cfg config.Bandwidth, sc *Scale, c *cluster.Cluster, clk clock.Clock) *Paced {
	if cfg.Rate == 0 {
		return nil
	}
	rate := sc.BandwidthRate(int64(cfg.Rate))
	// The least rate it may be set to: the strict fraction of the limit,
	// and in cluster mode a share at its floor (cluster.FloorPercent of the
	// limit ÷ live instances), taken as a thousandth: up to 20 instances.
	least := sc.LeastBandwidth(int64(cfg.Rate))
	if c != nil {
		least /= 1000
	}
	l, err := bandwidth.New(BandwidthOptions(app, rate, least, cfg.MaxDelay.D(), clk))
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("apps: bandwidth: %v", err))
	}
	p := &Paced{l: l, rate: rate}
	if c != nil {
		p.share = c.Bandwidth(app, l, rate)
	}
	return p
}

// Limiter is the limiter the app's pool paces with.
func (p *Paced) Limiter() *bandwidth.Limiter { return p.l }

// SetRate puts a new scaled rate in force in place, so that neither the
// limiter nor the cluster's demand sharing hands out a fresh burst.
func (p *Paced) SetRate(rate int64) {
	if p.rate == rate {
		return
	}
	p.rate = rate
	if p.share != nil {
		p.share.SetLimit(rate)
	} else {
		p.l.SetRate(rate)
	}
}

// Forget stops sharing the limit through the cluster (the app is gone or
// gets a new limiter); nil does nothing.
func (p *Paced) Forget() {
	if p != nil && p.share != nil {
		p.share.Close()
		p.share = nil
	}
}

// NewEjector makes the outlier ejector of cfg (nil when ejection is off),
// logging to log.
func NewEjector(cfg config.Ejection, log *slog.Logger) *health.Ejector {
	if cfg.MaxEjected == 0 {
		return nil
	}
	e, err := health.NewEjector(health.Ejection{ConsecutiveFailures: cfg.ConsecutiveFailures,
		BaseTime: cfg.BaseTime.D(), MaxTime: cfg.MaxTime.D(), MaxEjectedPercent: int(cfg.MaxEjected)},
		health.EjectorOptions{Logger: log})
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("apps: ejection: %v", err))
	}
	return e
}

// NewChecker makes the active health checker of set for cfg (nil when
// checks are off), logging to log. Its probes reach the backends as the
// app's leg up does: HTTP/1.1, h2c, or h2 with the leg's TLS client (the
// same roots, SNI and client certificate, as validation loaded them). It
// is not started: its owner starts it (health.Checker.Start) when it may
// run goroutines.
func NewChecker(set *balance.Set, cfg config.Health, up config.AppUpstream, clk clock.Clock, log *slog.Logger) *health.Checker {
	if !cfg.On() {
		return nil
	}
	check := health.Check{Path: cfg.Path, Interval: cfg.Interval.D(), Timeout: cfg.Timeout.D(),
		Healthy: cfg.Healthy, Unhealthy: cfg.Unhealthy, GRPC: cfg.GRPC, Service: cfg.Service}
	opts := health.CheckerOptions{Clock: clk, Logger: log}
	switch up.Protocol {
	case config.ProtocolH2C:
		check.Protocol = health.H2C
	case config.ProtocolH2:
		check.Protocol, opts.TLS = health.H2, up.TLS.Config
	}
	c, err := health.NewChecker(set, check, opts)
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("apps: health: %v", err))
	}
	return c
}
