package server

import (
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/overload"
)

// The limit scale (strict × overload) is apps.Scale. The server owns
// its changes: SetUnexpected recomposes every route, the overload loop
// rescales every app's limiter in place.

// overloadWatch is the overload monitor's state, owned by the overload
// loop (watchOverload).
type overloadWatch struct {
	sampler overload.Sampler
	mon     *overload.Monitor
	samples int
}

// SetUnexpected says whether this instance is unexpected (another levee
// holds the instance lock): its limits are then scaled to
// instance.strict_fraction. Switching recomposes every app's route, as a
// reload of the same config would, and is reported in
// levee_instance_role.
func (s *Server) SetUnexpected(unexpected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scale.SetUnexpected(unexpected)
	s.metrics.SetInstanceRole(unexpected)
	s.applyLocked(s.cfg) // publishes the scale
}

// setOverloadFactor puts f in force: every app's limiter gets its
// configured concurrency scaled anew, and rate limits read the new factor
// from their next request. It reports whether f changed anything.
func (s *Server) setOverloadFactor(f float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.scale.SetOverload(f) {
		return false
	}
	lf := s.scale.LimitFactor()
	for _, a := range s.apps {
		if a.adaptive != nil {
			a.adaptive.SetBase(a.conf, lf)
		} else {
			a.limiter.SetLimits(apps.ScaleLimits(a.conf, lf))
		}
	}
	s.metrics.SetOverloadFactor(f)
	s.publishScale()
	return true
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
	sc := &s.overload
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
	f, sig := sc.mon.Observe(apps.MonitorConfig(oc), sample)
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
