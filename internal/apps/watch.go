package apps

import (
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/overload"
)

// The table's periodic work (Run): the rate sweeps, the distribution
// alerts, the overload monitor, each turn one call its loop makes on a
// timer. The limit scale's changes are here too.

// SweepEvery is how often idle rate limit state is dropped.
const SweepEvery = 10 * time.Second

// Run does the table's periodic work until done is closed, on its clock:
// Sweep every SweepEvery, CheckDistribution every DistributionEvery, and
// OverloadTick every overload.interval of the config in force. Its owner
// (the server's Serve) calls it once, and it returns once each of its
// loops has.
func (t *Table) Run(done <-chan struct{}) {
	var loops sync.WaitGroup
	loops.Go(func() { clock.Every(t.o.Clock, done, SweepEvery, t.Sweep) })
	loops.Go(func() {
		clock.Every(t.o.Clock, done, DistributionEvery, func() { t.CheckDistribution(t.o.Clock.Now()) })
	})
	loops.Go(func() {
		clock.EveryOf(t.o.Clock, done, func() time.Duration { return t.overloadConfig().Interval.D() }, t.OverloadTick)
	})
	loops.Wait()
}

// overloadConfig is the overload section of the config in force.
func (t *Table) overloadConfig() config.Overload {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.Overload
}

// Distribution alerts: the imbalance of each app is evaluated every
// DistributionEvery over DistributionWindow, once it has minAlertRequests.
const (
	DistributionEvery  = 10 * time.Second
	DistributionWindow = time.Minute
	minAlertRequests   = 100
)

// CheckDistribution raises and clears each app's imbalance alert at now,
// logging once per change.
func (t *Table) CheckDistribution(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, a := range t.apps {
		shares, imb := a.window.Observe(a.backends, now)
		var n uint64
		for _, sh := range shares {
			n += sh.Requests
		}
		threshold := a.imbalanceAlert
		alert := n >= minAlertRequests && imb > threshold
		if alert == a.alert.Load() {
			continue
		}
		a.alert.Store(alert)
		if alert {
			t.o.Logger.Warn("backend distribution is uneven", "app", name, "imbalance", imb, "threshold", threshold)
		} else {
			t.o.Logger.Info("backend distribution is even again", "app", name, "imbalance", imb, "threshold", threshold)
		}
	}
}

// SetUnexpected says whether this instance is unexpected (another levee
// holds the instance lock), reported in levee_instance_role; its limits
// are scaled to instance.strict_fraction from the next SetConfig, which
// the caller makes (recomposing every route, as a reload would).
func (t *Table) SetUnexpected(unexpected bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scale.SetUnexpected(unexpected)
	t.o.Metrics.SetInstanceRole(unexpected)
}

// setOverloadFactor puts f in force: every app's limiter gets its
// configured concurrency scaled anew, and rate limits read the new factor
// from their next request. It reports whether f changed anything.
func (t *Table) setOverloadFactor(f float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.scale.SetOverload(f) {
		return false
	}
	lf := t.scale.LimitFactor()
	for _, a := range t.apps {
		if a.adaptive != nil {
			a.adaptive.SetBase(a.conf, lf)
		} else {
			a.limiter.SetLimits(ScaleLimits(a.conf, lf))
		}
	}
	t.o.Metrics.SetOverloadFactor(f)
	t.views.PublishScale(t.scale.View())
	return true
}

// noteSample keeps the overload monitor's last reading for the API.
func (t *Table) noteSample(sample overload.Sample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.views.NoteSample(t.scale.View(), sample)
}

// overloadWatch is the overload monitor's state, owned by the overload
// loop (OverloadTick).
type overloadWatch struct {
	sampler overload.Sampler
	mon     *overload.Monitor
	samples int
}

// OverloadTick is one turn of the overload loop (Run), which calls it
// every overload.interval: while overload.enabled it samples the host and
// puts the monitor's factor in force; turning the monitor off puts the
// limits back. One goroutine at a time calls it.
func (t *Table) OverloadTick() {
	sc, oc := &t.overload, t.overloadConfig()
	if !oc.Enabled {
		if sc.mon.Factor() != 1 {
			sc.mon.Reset()
			t.setOverloadFactor(1)
			t.o.Logger.Info("overload monitor off; limits back to their configured values")
		}
		return
	}
	if sc.sampler == nil {
		sc.sampler = overload.NewSystemHost() // its first CPU reading is the baseline
	}
	sample := sc.sampler.Sample()
	sc.samples++
	// The first sample has no CPU reading (it is the baseline): judge
	// what the host can read on the second, once.
	if m, ok := sc.sampler.(interface {
		Missing(overload.Sample) []string
	}); ok && sc.samples == 2 {
		if missing := m.Missing(sample); len(missing) > 0 {
			t.o.Logger.Warn("overload monitor cannot read some signals; they count as cool", "signals", missing)
		}
	}
	t.o.Metrics.SetOverloadReading(Reading(sample))
	t.noteSample(sample)
	prev := sc.mon.Factor()
	f, sig := sc.mon.Observe(MonitorConfig(oc), sample)
	if !t.setOverloadFactor(f) {
		return
	}
	switch {
	case prev == 1:
		t.o.Logger.Warn("host overloaded: limits tightened", "factor", f, "cpu", sample.CPU, "load", sample.Load,
			"memory", sample.Memory, "goroutines", sample.Goroutines, "gc_pause", sample.GCPause)
	case f == 1:
		t.o.Logger.Info("host load normal: limits back to their configured values")
	default:
		t.o.Logger.Debug("overload factor changed", "factor", f, "asked", sig.Min())
	}
}
