// Package overload turns readings of the host (CPU, load, memory,
// goroutines, GC pauses) into one factor in (0, 1] by which levee tightens
// its limits while the host is hot. The algorithm (Monitor) is apart from
// the readings (Sampler), so it is tested with injected samples; what the
// factor is applied to is the server's business.
package overload

import (
	"math"
	"time"
)

// Sample is one reading of the host. A float signal that could not be read
// is NaN and counts as cool.
type Sample struct {
	// CPU is the host's busy share of CPU time since the previous sample,
	// 0..1: user, nice, system, irq, softirq and steal.
	CPU float64
	// Load is the 1-minute load average per CPU.
	Load float64
	// Memory is the used share of the memory available to levee, 0..1.
	Memory float64
	// Goroutines is the number of goroutines.
	Goroutines int
	// GCPause is the longest stop-the-world GC pause since the previous sample.
	GCPause time.Duration
}

// Sampler reads the host. Sample is called by one goroutine at a time, once
// per interval; rates (CPU) are measured since the previous call.
type Sampler interface {
	Sample() Sample
}

// Band maps a signal to a factor: 1 at or below Start, falling linearly to
// the monitor's MinFactor at Full and staying there above it.
type Band struct {
	Start, Full float64
}

// Config is what the Monitor needs. Shares are 0..1.
type Config struct {
	// MinFactor is the floor of the factor, > 0.
	MinFactor float64
	// Hysteresis is how far the signals' factor must rise above the factor
	// in force before it loosens; tightening is immediate.
	Hysteresis float64
	// Recovery is the most the factor rises per observation.
	Recovery float64
	CPU      Band // share
	Load     Band // per CPU
	Memory   Band // share
	// Goroutines is a count; GCPause in seconds.
	Goroutines Band
	GCPause    Band
}

// Signals are the factor each signal asks for in one observation, for the
// levee_overload_signal metric.
type Signals struct {
	CPU, Load, Memory, Goroutines, GCPause float64
}

// Min is the smallest of the signals' factors.
func (s Signals) Min() float64 {
	return min(s.CPU, s.Load, s.Memory, s.Goroutines, s.GCPause)
}

// Monitor keeps the factor in force between observations. Its zero value
// is not ready; use NewMonitor. It is not safe for concurrent use: one
// goroutine (the server's overload loop) owns it.
type Monitor struct {
	factor float64
}

// NewMonitor returns a Monitor whose factor is 1 (limits as configured).
func NewMonitor() *Monitor { return &Monitor{factor: 1} }

// Factor returns the factor in force.
func (m *Monitor) Factor() float64 { return m.factor }

// Reset puts the factor back to 1 (the monitor was turned off).
func (m *Monitor) Reset() { m.factor = 1 }

// quantum is the step of the factor, so that a signal wandering inside a
// band does not move every limit at every observation.
const quantum = 0.01

// Observe takes one sample and returns the factor now in force and what
// each signal asked for. The factor drops at once to what the hottest
// signal asks; it rises only once that is Hysteresis above it (or every
// signal is cool), and then by at most Recovery per observation, so the
// load that was shed does not all return at once.
func (m *Monitor) Observe(c Config, s Sample) (float64, Signals) {
	floor := math.Min(math.Max(c.MinFactor, quantum), 1)
	sig := Signals{
		CPU:        c.CPU.factor(s.CPU, floor),
		Load:       c.Load.factor(s.Load, floor),
		Memory:     c.Memory.factor(s.Memory, floor),
		Goroutines: c.Goroutines.factor(float64(s.Goroutines), floor),
		GCPause:    c.GCPause.factor(s.GCPause.Seconds(), floor),
	}
	target := sig.Min()
	if target < 1 {
		// Round down to the quantum, never below the floor.
		target = math.Max(math.Floor(target/quantum+1e-9)*quantum, floor)
	}
	switch {
	case target < m.factor:
		m.factor = target
	case target > m.factor && (target >= 1 || target-m.factor >= c.Hysteresis-1e-9):
		m.factor = math.Min(target, math.Round((m.factor+math.Max(c.Recovery, quantum))/quantum)*quantum)
	}
	return m.factor, sig
}

// factor is what one signal's value v asks for.
func (b Band) factor(v, floor float64) float64 {
	if !(v > b.Start) { // also NaN: a signal that cannot be read is cool
		return 1
	}
	if v >= b.Full || b.Full <= b.Start {
		return floor
	}
	return 1 - (1-floor)*(v-b.Start)/(b.Full-b.Start)
}
