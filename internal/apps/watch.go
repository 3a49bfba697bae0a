package apps

import (
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/overload"
)

// The table's periodic work, each turn one call that its owner's loop
// makes on a timer: the distribution alerts, the overload monitor. The
// limit scale's changes are here too.

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
		threshold := a.cfg.Balance.ImbalanceAlert
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

// OverloadTick is one turn of the overload loop, which calls it every
// oc.Interval: while oc.Enabled it samples the host and puts the
// monitor's factor in force; turning the monitor off puts the limits
// back. One goroutine at a time calls it.
func (t *Table) OverloadTick(oc config.Overload) {
	sc := &t.overload
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
