package apps

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/overload"
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
//     scaled anew, and rate limits read the factor from one atomic per
//     request.
//
// Every scaled limit is at least 1, so a tightened app still serves.

// Scale is the limit scale. Init it before use. Its rate factor is read
// per request without a lock; every other method is guarded by its
// owner's lock.
type Scale struct {
	// rate is strict × overload as float64 bits: what rate limits are
	// multiplied by now.
	rate atomic.Uint64

	unexpected bool
	strict     float64
	overload   float64
	// fraction is the least strict may become without a restart:
	// instance.strict_fraction when an unexpected instance serves (strict),
	// else 1. Bandwidth limiters size their chunks for it.
	fraction float64
}

// Init sets every factor to 1.
func (sc *Scale) Init() {
	sc.strict, sc.overload, sc.fraction = 1, 1, 1
	sc.rate.Store(math.Float64bits(1))
}

// SetConfig takes cfg's strict fraction.
func (sc *Scale) SetConfig(cfg *config.Config) {
	sc.strict = 1
	sc.fraction = 1
	if cfg.Instance.Unexpected == config.UnexpectedStrict {
		sc.fraction = float64(cfg.Instance.StrictFraction) / 100
	}
	if sc.unexpected {
		sc.strict = float64(cfg.Instance.StrictFraction) / 100
	}
	sc.rate.Store(math.Float64bits(sc.LimitFactor()))
}

// SetUnexpected says whether another levee holds the instance lock; the
// strict factor follows at the next SetConfig.
func (sc *Scale) SetUnexpected(unexpected bool) { sc.unexpected = unexpected }

// SetOverload puts the overload factor f in force for rate limits; it
// reports whether f changed anything.
func (sc *Scale) SetOverload(f float64) bool {
	if f == sc.overload {
		return false
	}
	sc.overload = f
	sc.rate.Store(math.Float64bits(sc.LimitFactor()))
	return true
}

// RateFactor is what rate limits read per request (limits.Gate.RateFactor).
func (sc *Scale) RateFactor() *atomic.Uint64 { return &sc.rate }

// LimitFactor is what concurrency and rate limits are multiplied by now.
func (sc *Scale) LimitFactor() float64 { return sc.strict * sc.overload }

// Strict is the strict factor now.
func (sc *Scale) Strict() float64 { return sc.strict }

// BandwidthRate scales a bandwidth rate (bytes/s; 0 is off) by the strict
// factor.
func (sc *Scale) BandwidthRate(rate int64) int64 {
	if rate == 0 || sc.strict >= 1 {
		return rate
	}
	return max(1, int64(float64(rate)*sc.strict))
}

// LeastBandwidth is the least a bandwidth rate may be scaled to without
// a restart: its strict fraction.
func (sc *Scale) LeastBandwidth(rate int64) int64 { return int64(float64(rate) * min(sc.fraction, 1)) }

// View is the scale as the admin API shows it.
func (sc *Scale) View() ScaleView {
	return ScaleView{Unexpected: sc.unexpected, Strict: sc.strict, Overload: sc.overload}
}

// ScaleLimits scales the concurrency of lim by f, never below 1; the
// queue is kept.
func ScaleLimits(lim admit.Limits, f float64) admit.Limits {
	lim.Concurrency = limits.ScaleCount(lim.Concurrency, f)
	return lim
}

// BandwidthOptions are an app's bandwidth limiter options at rate. The
// limiter's rate may later be set as low as least (the strict fraction, a
// cluster share) without rebuilding it, so its chunks are sized for least:
// a rate below what the configured max_delay allows for a default chunk
// gets smaller chunks, so the limiter still paces instead of failing.
func BandwidthOptions(name string, rate, least int64, maxDelay time.Duration, clk clock.Clock) bandwidth.Options {
	o := bandwidth.Options{Name: name, Rate: rate, MaxDelay: maxDelay, Clock: clk}.WithDefaults()
	least = max(min(least, rate), 1)
	if most := least * int64(o.MaxDelay) / int64(time.Second); int64(o.Chunk) > most {
		o.Chunk = int(max(most, 1))
	}
	return o
}

// MonitorConfig converts overload's config to the monitor's units.
func MonitorConfig(o config.Overload) overload.Config {
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
