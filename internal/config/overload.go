package config

import "time"

// Overload configures the host overload monitor: every Interval it samples
// the host and turns each signal into a factor, 1 up to its Start and
// falling linearly to MinFactor at its Full; the smallest factor scales
// every app's concurrency and rate limits. Off by default: a limit that
// moves with other processes' load must be asked for (docs/config.md).
type Overload struct {
	Enabled  bool     `yaml:"enabled"`
	Interval Duration `yaml:"interval"`
	// MinFactor is the floor: limits never fall below this share (and 1).
	MinFactor Percent `yaml:"min_factor"`
	// Hysteresis is how far the signals' factor must rise above the one in
	// force before limits loosen; tightening is immediate.
	Hysteresis Percent `yaml:"hysteresis"`
	// Recovery is the most the factor rises per Interval.
	Recovery Percent `yaml:"recovery"`
	// CPU is the host's busy share, softirq, irq and steal included.
	CPU PercentBand `yaml:"cpu"`
	// Load is the 1-minute load average per CPU.
	Load LoadBand `yaml:"load"`
	// Memory is the used share of the cgroup's memory.max (working set:
	// memory.current less inactive file pages), or of the host's memory.
	Memory     PercentBand  `yaml:"memory"`
	Goroutines CountBand    `yaml:"goroutines"`
	GCPause    DurationBand `yaml:"gc_pause"`
}

// PercentBand is a signal in percent: Start ≤ Full.
type PercentBand struct {
	Start Percent `yaml:"start"`
	Full  Percent `yaml:"full"`
}

// LoadBand is a load average per CPU: 0 < Start ≤ Full.
type LoadBand struct {
	Start float64 `yaml:"start"`
	Full  float64 `yaml:"full"`
}

// CountBand is a count: 0 < Start ≤ Full.
type CountBand struct {
	Start int `yaml:"start"`
	Full  int `yaml:"full"`
}

// DurationBand is a duration: 0 < Start ≤ Full.
type DurationBand struct {
	Start Duration `yaml:"start"`
	Full  Duration `yaml:"full"`
}

// Overload defaults: conservative, so that a monitor turned on acts only
// when the host is clearly saturated.
const (
	DefaultOverloadInterval   = time.Second
	DefaultOverloadMinFactor  = 10
	DefaultOverloadHysteresis = 5
	DefaultOverloadRecovery   = 10
)

// DefaultOverload returns the overload section's defaults.
func DefaultOverload() Overload {
	return Overload{
		Interval:   Duration(DefaultOverloadInterval),
		MinFactor:  DefaultOverloadMinFactor,
		Hysteresis: DefaultOverloadHysteresis,
		Recovery:   DefaultOverloadRecovery,
		CPU:        PercentBand{Start: 90, Full: 100},
		Load:       LoadBand{Start: 2, Full: 4},
		Memory:     PercentBand{Start: 90, Full: 98},
		Goroutines: CountBand{Start: 100_000, Full: 1_000_000},
		GCPause:    DurationBand{Start: Duration(10 * time.Millisecond), Full: Duration(100 * time.Millisecond)},
	}
}

func (o *Overload) validate(errs *Errors) {
	if o.Interval < Duration(10*time.Millisecond) || o.Interval > Duration(time.Minute) {
		errs.add("overload.interval", "must be 10ms..1m (got %s)", o.Interval)
	}
	within(errs, "overload.min_factor", int(o.MinFactor), 1, 100)
	within(errs, "overload.hysteresis", int(o.Hysteresis), 0, 50)
	within(errs, "overload.recovery", int(o.Recovery), 1, 100)
	if o.CPU.Start > o.CPU.Full {
		errs.add("overload.cpu.start", "must be ≤ overload.cpu.full (%d%% > %d%%)", o.CPU.Start, o.CPU.Full)
	}
	if o.Memory.Start > o.Memory.Full {
		errs.add("overload.memory.start", "must be ≤ overload.memory.full (%d%% > %d%%)", o.Memory.Start, o.Memory.Full)
	}
	if !(o.Load.Start > 0) || o.Load.Start > 1e6 {
		errs.add("overload.load.start", "must be > 0 and ≤ 1e6 (got %g)", o.Load.Start)
	} else if !(o.Load.Full >= o.Load.Start) || o.Load.Full > 1e6 {
		errs.add("overload.load.full", "must be ≥ overload.load.start and ≤ 1e6 (got %g)", o.Load.Full)
	}
	if o.Goroutines.Start < 1 {
		errs.add("overload.goroutines.start", "must be > 0 (got %d)", o.Goroutines.Start)
	} else if o.Goroutines.Full < o.Goroutines.Start {
		errs.add("overload.goroutines.full", "must be ≥ overload.goroutines.start (got %d)", o.Goroutines.Full)
	}
	if o.GCPause.Start <= 0 {
		errs.add("overload.gc_pause.start", "must be > 0 (got %s)", o.GCPause.Start)
	} else if o.GCPause.Full < o.GCPause.Start {
		errs.add("overload.gc_pause.full", "must be ≥ overload.gc_pause.start (got %s)", o.GCPause.Full)
	}
}
