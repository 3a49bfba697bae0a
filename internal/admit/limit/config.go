package limit

import (
	"cmp"
	"fmt"
	"math"
	"time"
)

// Defaults for the zero fields of a Config.
const (
	DefaultMin        = 8
	DefaultMax        = 1024
	DefaultWindow     = 100 * time.Millisecond
	DefaultMinSamples = 10
	DefaultSmoothing  = 0.2
	DefaultTolerance  = 1.0
	DefaultProbeEvery = 10 * time.Second
	DefaultProbeDepth = 0.1
)

// Config configures a Gradient. Zero fields take the defaults (WithDefaults); the config a user
// writes is typically only concurrency: {adaptive: gradient, min: 8, max: 1024}.
type Config struct {
	// Min is the floor of the limit (default 8). It is only a floor: the algorithm never drops
	// to it to measure anything.
	Min int
	// Max is the ceiling of the limit (default 1024).
	Max int
	// Initial is the limit before any window has closed; default min(Max, 2·Min).
	Initial int
	// Window is the shortest span of one aggregation window (default 100ms).
	Window time.Duration
	// MinSamples is the fewest samples that close a window (default 10).
	MinSamples int
	// Smoothing is the weight of each window's target in the new limit, in (0, 1] (default 0.2).
	Smoothing float64
	// Tolerance multiplies the latency ratio long/short: 1.5 accepts 50% added latency before
	// the limit falls. At least 1 (default 1).
	Tolerance float64
	// Queue is the growth headroom ("probe") added to the limit each window, in requests: the
	// standing queue the limit keeps above the backend's capacity. 0 (the default) means
	// max(4, √limit).
	Queue int
	// ProbeEvery is how often the baseline RTT is re-measured (default 10s).
	ProbeEvery time.Duration
	// ProbeDepth sets the probe's limit, (1 − ProbeDepth)·limit − q, in [0, 0.9] (default 0.1).
	// A probe never goes below Min; it lasts until MinSamples requests admitted under it
	// completed (at least one Window, at most 20).
	ProbeDepth float64
}

// ConfigError reports an invalid Config field. Field is the field's name in configuration
// (min, max, initial, window, min_samples, smoothing, tolerance, queue,
// probe_every, probe_depth), so the caller can
// prefix its own path.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "limit: " + e.Field + ": " + e.Msg }

// WithDefaults returns c with its zero fields set to their defaults. It never changes a
// non-zero field, even an invalid one: Validate reports those.
func (c Config) WithDefaults() Config {
	c.Min = cmp.Or(c.Min, DefaultMin)
	c.Max = cmp.Or(c.Max, DefaultMax)
	if c.Initial == 0 {
		c.Initial = min(c.Max, 2*c.Min)
	}
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.MinSamples = cmp.Or(c.MinSamples, DefaultMinSamples)
	c.Smoothing = cmp.Or(c.Smoothing, DefaultSmoothing)
	c.Tolerance = cmp.Or(c.Tolerance, DefaultTolerance)
	c.ProbeEvery = cmp.Or(c.ProbeEvery, DefaultProbeEvery)
	c.ProbeDepth = cmp.Or(c.ProbeDepth, DefaultProbeDepth)
	return c
}

// Validate reports the first invalid field of a defaulted Config as a *ConfigError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Min < 1:
		return bad("min", "must be ≥ 1, got %d", c.Min)
	case c.Max < c.Min:
		return bad("max", "must be ≥ min (%d), got %d", c.Min, c.Max)
	case c.Initial < c.Min || c.Initial > c.Max:
		return bad("initial", "must be within [min, max] = [%d, %d], got %d", c.Min, c.Max, c.Initial)
	case c.Window <= 0:
		return bad("window", "must be > 0, got %v", c.Window)
	case c.MinSamples < 1:
		return bad("min_samples", "must be ≥ 1, got %d", c.MinSamples)
	case !(c.Smoothing > 0 && c.Smoothing <= 1):
		return bad("smoothing", "must be in (0, 1], got %v", c.Smoothing)
	case !(c.Tolerance >= 1) || math.IsInf(c.Tolerance, 0):
		return bad("tolerance", "must be a finite number ≥ 1, got %v", c.Tolerance)
	case c.Queue < 0:
		return bad("queue", "must be ≥ 0, got %d", c.Queue)
	case c.ProbeEvery <= 0:
		return bad("probe_every", "must be > 0, got %v", c.ProbeEvery)
	case !(c.ProbeDepth >= 0 && c.ProbeDepth <= 0.9):
		return bad("probe_depth", "must be in [0, 0.9], got %v", c.ProbeDepth)
	}
	return nil
}
