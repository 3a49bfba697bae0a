package limit

import (
	"math"
	"time"
)

// Constants of the algorithm (see the package documentation).
const (
	rebaseInflight = 0.6 // a rebase needs in-flight at most this fraction of the reference's
	rebaseRTT      = 0.8 // ... while RTT stays at least this fraction of the reference's
	baselineFall   = 0.1 // EWMA weight of a window RTT below the baseline
	minGradient    = 0.5
	minQueue       = 4
	probeWindows   = 20 // a probe that gathers too few samples is abandoned after this many windows
)

// Gradient is the Gradient2 adaptive concurrency limit described in the package documentation.
// Create one with NewGradient; its zero value is not usable. It is not safe for concurrent use.
type Gradient struct {
	cfg   Config
	limit float64

	baseline float64 // long RTT, ns; 0 until the first window
	short    float64 // last window's mean RTT, ns

	win   window
	probe probe

	// The current run of falling limits, for rebasing.
	falling     bool
	refRTT      float64
	refInflight float64
	rebases     int
	probes      int
}

// window aggregates the samples of one window.
type window struct {
	start       time.Time
	n           int   // samples with an RTT
	drops       int   // dropped samples
	sumRTT      int64 // ns
	sumInflight int64
	maxInflight int
}

// probe is a baseline re-measurement: the limit is lowered to `limit` and the RTTs of requests
// admitted after `start` under that limit are averaged.
type probe struct {
	active  bool
	start   time.Time
	next    time.Time // when the next probe starts
	limit   int
	floored bool // limit was raised to Min
	n       int
	sumRTT  int64
}

// Stats is a snapshot of a Gradient's state, for metrics and tests.
type Stats struct {
	Limit    int           // the limit, outside of probes
	Probe    int           // the lowered limit Limit() returns during a probe; 0 when not probing
	Baseline time.Duration // long RTT; 0 before the first window
	Short    time.Duration // mean RTT of the last closed window
	Rebases  int           // times the baseline was reset on evidence that latency is not load
	Probes   int           // probes completed
}

// NewGradient returns a Gradient for c after WithDefaults, or the *ConfigError Validate reports.
func NewGradient(c Config) (*Gradient, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Gradient{cfg: c, limit: float64(c.Initial)}, nil
}

// Limit returns the current limit, within [Min, Max]. During a probe it is the probe's limit.
func (g *Gradient) Limit() int {
	if g.probe.active {
		return g.probe.limit
	}
	return int(g.limit)
}

// Stats returns a snapshot of g's state.
func (g *Gradient) Stats() Stats {
	st := Stats{
		Limit:    int(g.limit),
		Baseline: time.Duration(g.baseline),
		Short:    time.Duration(g.short),
		Rebases:  g.rebases,
		Probes:   g.probes,
	}
	if g.probe.active {
		st.Probe = g.probe.limit
	}
	return st
}

// Observe records one completed request (see Algorithm.Observe). A negative rtt is ignored.
// The window closes, and the limit is recomputed, on the first sample at least Window after the
// window's first sample once it holds MinSamples samples.
func (g *Gradient) Observe(now time.Time, rtt time.Duration, inflight int, dropped bool) {
	if rtt < 0 {
		return
	}
	w := &g.win
	if w.n+w.drops == 0 {
		w.start = now
	}
	if dropped {
		w.drops++
	} else {
		w.n++
		w.sumRTT += int64(rtt)
	}
	w.sumInflight += int64(inflight)
	w.maxInflight = max(w.maxInflight, inflight)
	if g.probe.active {
		g.observeProbe(now, rtt, inflight, dropped)
	}
	if w.n+w.drops >= g.cfg.MinSamples && now.Sub(w.start) >= g.cfg.Window {
		g.closeWindow(now)
	}
}

func (g *Gradient) closeWindow(now time.Time) {
	w := g.win
	g.win = window{}
	if w.n == 0 {
		return // only drops: no latency to learn from
	}
	short := max(float64(w.sumRTT)/float64(w.n), 1)
	g.short = short
	if g.probe.active {
		return // the probe owns the baseline; its windows do not move the limit
	}
	switch {
	case g.baseline == 0:
		g.baseline = short
		g.probe.next = now.Add(g.cfg.ProbeEvery)
	case short < g.baseline:
		g.baseline += baselineFall * (short - g.baseline)
	}
	if float64(w.maxInflight) < g.limit/2 {
		g.falling = false // limited by the caller, not the backend
	} else {
		g.update(now, short, float64(w.sumInflight)/float64(w.n+w.drops))
	}
	if !g.falling && !now.Before(g.probe.next) {
		g.startProbe(now)
	}
}

// queue is the growth headroom q.
func (g *Gradient) queue() float64 {
	if g.cfg.Queue > 0 {
		return float64(g.cfg.Queue)
	}
	return max(minQueue, math.Sqrt(g.limit))
}

// update applies the Gradient2 step for one window.
func (g *Gradient) update(now time.Time, short, inflight float64) {
	grad := min(max(g.cfg.Tolerance*g.baseline/short, minGradient), 1)
	next := g.limit*(1-g.cfg.Smoothing) + (g.limit*grad+g.queue())*g.cfg.Smoothing
	next = min(max(next, float64(g.cfg.Min)), float64(g.cfg.Max))
	if next >= g.limit {
		g.falling = false
		g.limit = next
		return
	}
	if g.rebase(short, inflight) {
		// Hold the limit: the latency was not ours to shed. The rebase was a re-measurement,
		// so the next probe can wait.
		g.probe.next = now.Add(g.cfg.ProbeEvery)
		return
	}
	g.limit = next
}

// rebase tracks a run of falling limits and resets the baseline to short when shedding load
// did not lower latency. It reports whether it did.
func (g *Gradient) rebase(short, inflight float64) bool {
	if !g.falling || short > g.refRTT {
		g.falling, g.refRTT, g.refInflight = true, short, inflight
		return false
	}
	shed := inflight <= rebaseInflight*g.refInflight || g.limit <= float64(g.cfg.Min)
	if !shed || short < rebaseRTT*g.refRTT {
		return false
	}
	g.baseline = short
	g.falling = false
	g.rebases++
	return true
}

func (g *Gradient) startProbe(now time.Time) {
	l := (1-g.cfg.ProbeDepth)*g.limit - g.queue()
	g.probe = probe{active: true, start: now, limit: max(g.cfg.Min, int(l)), floored: int(l) < g.cfg.Min}
}

// observeProbe counts the samples admitted under the probe's limit and ends the probe.
func (g *Gradient) observeProbe(now time.Time, rtt time.Duration, inflight int, dropped bool) {
	p := &g.probe
	if !dropped && inflight <= p.limit && !now.Add(-rtt).Before(p.start) {
		p.n++
		p.sumRTT += int64(rtt)
	}
	elapsed := now.Sub(p.start)
	done := p.n >= g.cfg.MinSamples && elapsed >= g.cfg.Window
	if !done && elapsed < probeWindows*g.cfg.Window {
		return
	}
	if done {
		g.probes++
		rtt := max(float64(p.sumRTT)/float64(p.n), 1)
		// A probe held up by Min may still be above the backend's knee: it can then only
		// lower the baseline.
		if rtt < g.baseline || !p.floored {
			g.baseline = rtt
		}
	}
	*p = probe{next: now.Add(g.cfg.ProbeEvery)}
	g.win = window{} // the next window starts at the restored limit
}
