package limit

import (
	"math"
	"time"
)

// Rebase thresholds (see the package documentation): the baseline is reset when a window has
// at most rebaseInflight of the reference window's in-flight count while its RTT is at least
// rebaseRTT of the reference RTT. baselineFall is the EWMA weight of a lower RTT.
const (
	rebaseInflight = 0.6
	rebaseRTT      = 0.8
	baselineFall   = 0.1
	minGradient    = 0.5
	minQueue       = 4
)

// Gradient is the Gradient2 adaptive concurrency limit described in the package documentation.
// Create one with NewGradient; its zero value is not usable. It is not safe for concurrent use.
type Gradient struct {
	cfg   Config
	limit float64

	baseline float64 // long RTT, ns; 0 until the first window
	short    float64 // last window's mean RTT, ns

	// The open window.
	start       time.Time
	n           int   // samples with an RTT
	drops       int   // dropped samples
	sumRTT      int64 // ns
	sumInflight int64
	maxInflight int

	// The current run of falling limits, for rebasing.
	falling     bool
	refRTT      float64
	refInflight float64
	rebases     int
}

// Stats is a snapshot of a Gradient's state, for metrics and tests.
type Stats struct {
	Limit    int
	Baseline time.Duration // long RTT; 0 before the first window
	Short    time.Duration // mean RTT of the last closed window
	Rebases  int           // times the baseline was reset upward on evidence
}

// NewGradient returns a Gradient for c after WithDefaults, or the *ConfigError Validate reports.
func NewGradient(c Config) (*Gradient, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Gradient{cfg: c, limit: float64(c.Initial)}, nil
}

// Limit returns the current limit, within [Min, Max].
func (g *Gradient) Limit() int { return int(g.limit) }

// Stats returns a snapshot of g's state.
func (g *Gradient) Stats() Stats {
	return Stats{
		Limit:    g.Limit(),
		Baseline: time.Duration(g.baseline),
		Short:    time.Duration(g.short),
		Rebases:  g.rebases,
	}
}

// Observe records one completed request (see Algorithm.Observe). A negative rtt is ignored.
// The window closes, and the limit is recomputed, on the first sample at least Window after the
// window's first sample once it holds MinSamples samples.
func (g *Gradient) Observe(now time.Time, rtt time.Duration, inflight int, dropped bool) {
	if rtt < 0 {
		return
	}
	if g.n+g.drops == 0 {
		g.start = now
	}
	if dropped {
		g.drops++
	} else {
		g.n++
		g.sumRTT += int64(rtt)
	}
	g.sumInflight += int64(inflight)
	g.maxInflight = max(g.maxInflight, inflight)
	if g.n+g.drops >= g.cfg.MinSamples && now.Sub(g.start) >= g.cfg.Window {
		g.closeWindow()
	}
}

func (g *Gradient) closeWindow() {
	n, total, sumRTT, sumInflight, maxInflight := g.n, g.n+g.drops, g.sumRTT, g.sumInflight, g.maxInflight
	g.n, g.drops, g.sumRTT, g.sumInflight, g.maxInflight = 0, 0, 0, 0, 0
	if n == 0 {
		return // only drops: no latency to learn from
	}
	short := max(float64(sumRTT)/float64(n), 1)
	inflight := float64(sumInflight) / float64(total)
	g.short = short
	switch {
	case g.baseline == 0:
		g.baseline = short
	case short < g.baseline:
		g.baseline += baselineFall * (short - g.baseline)
	}
	if float64(maxInflight) < g.limit/2 {
		g.falling = false
		return // limited by the caller, not the backend
	}
	q := float64(g.cfg.Queue)
	if q == 0 {
		q = max(minQueue, math.Sqrt(g.limit))
	}
	grad := min(max(g.cfg.Tolerance*g.baseline/short, minGradient), 1)
	next := g.limit*(1-g.cfg.Smoothing) + (g.limit*grad+q)*g.cfg.Smoothing
	next = min(max(next, float64(g.cfg.Min)), float64(g.cfg.Max))
	if next < g.limit {
		g.fall(short, inflight)
	} else {
		g.falling = false
	}
	if g.falling || next >= g.limit {
		g.limit = next
	}
}

// fall tracks a run of falling limits and rebases the baseline when shedding load did not
// lower latency. After a rebase the limit is held for this window.
func (g *Gradient) fall(short, inflight float64) {
	if !g.falling || short > g.refRTT {
		g.falling, g.refRTT, g.refInflight = true, short, inflight
		return
	}
	shed := inflight <= rebaseInflight*g.refInflight || g.limit <= float64(g.cfg.Min)
	if shed && short >= rebaseRTT*g.refRTT {
		g.baseline = short
		g.falling = false
		g.rebases++
	}
}
