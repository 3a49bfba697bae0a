package server

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// How limits bend without a reload. Two factors scale the configured limits:
//
//   - strict: instance.strict_fraction while this instance is unexpected
//     (another levee holds the instance lock), else 1. It scales
//     concurrency, rate, client rate and bandwidth. It changes rarely (at
//     startup, on takeover), so it is applied by recomposing the routes.
//   - overload: the host overload monitor's factor, 1 unless
//     overload.enabled and the host is hot. It scales concurrency and
//     rates, and may change every overload.interval, so it is applied
//     without recomposing: each app's limiter gets its configured limits
//     (kept in app.conf) scaled, and rate limits read the factor from one
//     atomic per request.
//
// Every scaled limit is at least 1, so a tightened app still serves.

// scaleState is the server's limit scale.
type scaleState struct {
	// rate is strict × overload as float64 bits: what rate limits are
	// multiplied by now. Read per request, without a lock.
	rate atomic.Uint64

	// Guarded by Server.mu.
	unexpected bool
	strict     float64
	overload   float64
	// fraction is the least strict may become without a restart:
	// instance.strict_fraction when an unexpected instance serves (strict),
	// else 1. Bandwidth limiters size their chunks for it.
	fraction float64

	// Owned by the overload loop (watchOverload).
	sampler overload.Sampler
	mon     *overload.Monitor
	samples int
}

func (sc *scaleState) init(sampler overload.Sampler) {
	sc.strict, sc.overload = 1, 1
	sc.sampler, sc.mon = sampler, overload.NewMonitor()
	sc.rate.Store(math.Float64bits(1))
}

// setConfig takes cfg's strict fraction; the caller holds Server.mu.
func (sc *scaleState) setConfig(cfg *config.Config) {
	sc.strict = 1
	sc.fraction = 1
	if cfg.Instance.Unexpected == config.UnexpectedStrict {
		sc.fraction = float64(cfg.Instance.StrictFraction) / 100
	}
	if sc.unexpected {
		sc.strict = float64(cfg.Instance.StrictFraction) / 100
	}
	sc.rate.Store(math.Float64bits(sc.limitFactor()))
}

// limitFactor is what concurrency and rate limits are multiplied by now;
// the caller holds Server.mu.
func (sc *scaleState) limitFactor() float64 { return sc.strict * sc.overload }

// bandwidthRate scales a bandwidth rate (bytes/s; 0 is off) by the strict
// factor; the caller holds Server.mu.
func (sc *scaleState) bandwidthRate(rate int64) int64 {
	if rate == 0 || sc.strict >= 1 {
		return rate
	}
	return max(1, int64(float64(rate)*sc.strict))
}

// scaleCount scales a limit by f, never below 1 (limits.ScaleCount).
func scaleCount(n int, f float64) int { return limits.ScaleCount(n, f) }

// scaleLimits scales the concurrency of lim by f; the queue is kept.
func scaleLimits(lim admit.Limits, f float64) admit.Limits {
	lim.Concurrency = scaleCount(lim.Concurrency, f)
	return lim
}

// scaleRate scales a GCRA limit by f (limits.ScaleRate).
func scaleRate(l ratelimit.Limit, f float64) ratelimit.Limit { return limits.ScaleRate(l, f) }

// bandwidthOptions are an app's bandwidth limiter options at rate. The
// limiter's rate may later be set as low as least (the strict fraction, a
// cluster share) without rebuilding it, so its chunks are sized for least:
// a rate below what the configured max_delay allows for a default chunk
// gets smaller chunks, so the limiter still paces instead of failing.
func bandwidthOptions(name string, rate, least int64, maxDelay time.Duration, clk clock.Clock) bandwidth.Options {
	o := bandwidth.Options{Name: name, Rate: rate, MaxDelay: maxDelay, Clock: clk}.WithDefaults()
	least = max(min(least, rate), 1)
	if most := least * int64(o.MaxDelay) / int64(time.Second); int64(o.Chunk) > most {
		o.Chunk = int(max(most, 1))
	}
	return o
}

// SetUnexpected says whether this instance is unexpected (another levee
// holds the instance lock): its limits are then scaled to
// instance.strict_fraction. Switching recomposes every app's route, as a
// reload of the same config would, and is reported in
// levee_instance_role.
func (s *Server) SetUnexpected(unexpected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scale.unexpected = unexpected
	s.metrics.SetInstanceRole(unexpected)
	s.applyLocked(s.cfg) // publishes the scale
}

// setOverloadFactor puts f in force: every app's limiter gets its
// configured concurrency scaled anew, and rate limits read the new factor
// from their next request. It reports whether f changed anything.
func (s *Server) setOverloadFactor(f float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == s.scale.overload {
		return false
	}
	s.scale.overload = f
	lf := s.scale.limitFactor()
	s.scale.rate.Store(math.Float64bits(lf))
	for _, a := range s.apps {
		if a.adaptive != nil {
			a.adaptive.SetBase(a.conf, lf)
		} else {
			a.limiter.SetLimits(scaleLimits(a.conf, lf))
		}
	}
	s.metrics.SetOverloadFactor(f)
	s.publishScale()
	return true
}

// monitorConfig converts overload's config to the monitor's units.
func monitorConfig(o config.Overload) overload.Config {
	pct := func(p config.Percent) float64 { return float64(p) / 100 }
	return overload.Config{
		MinFactor: pct(o.MinFactor), Hysteresis: pct(o.Hysteresis), Recovery: pct(o.Recovery),
		CPU:        overload.Band{Start: pct(o.CPU.Start), Full: pct(o.CPU.Full)},
		Load:       overload.Band{Start: o.Load.Start, Full: o.Load.Full},
		Memory:     overload.Band{Start: pct(o.Memory.Start), Full: pct(o.Memory.Full)},
		Goroutines: overload.Band{Start: float64(o.Goroutines.Start), Full: float64(o.Goroutines.Full)},
		GCPause:    overload.Band{Start: o.GCPause.Start.D().Seconds(), Full: o.GCPause.Full.D().Seconds()},
	}
}

// watchOverload samples the host every overload.interval while
// overload.enabled, and puts the monitor's factor in force, until done;
// owned by Serve. Turning the monitor off on reload puts the limits back.
func (s *Server) watchOverload(done <-chan struct{}) {
	s.everyOf(done, func() time.Duration { return s.Config().Overload.Interval.D() }, s.overloadTick)
}

// overloadTick is one turn of watchOverload.
func (s *Server) overloadTick() {
	oc := s.Config().Overload
	sc := &s.scale
	if !oc.Enabled {
		if sc.mon.Factor() != 1 {
			sc.mon.Reset()
			s.setOverloadFactor(1)
			s.log.Info("overload monitor off; limits back to their configured values")
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
			s.log.Warn("overload monitor cannot read some signals; they count as cool", "signals", missing)
		}
	}
	s.metrics.SetOverloadReading(apps.Reading(sample))
	s.noteSample(sample)
	prev := sc.mon.Factor()
	f, sig := sc.mon.Observe(monitorConfig(oc), sample)
	if !s.setOverloadFactor(f) {
		return
	}
	switch {
	case prev == 1:
		s.log.Warn("host overloaded: limits tightened", "factor", f, "cpu", sample.CPU, "load", sample.Load,
			"memory", sample.Memory, "goroutines", sample.Goroutines, "gc_pause", sample.GCPause)
	case f == 1:
		s.log.Info("host load normal: limits back to their configured values")
	default:
		s.log.Debug("overload factor changed", "factor", f, "asked", sig.Min())
	}
}
