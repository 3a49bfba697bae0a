package limit

import "time"

// Resume continues from what another Gradient learnt (its Stats' Limit
// and Baseline, handed over by an upgrade) instead of from the initial
// limit: the limit, kept within the configured bounds, and the long RTT
// (0 leaves it to the first window). A probe under way ends.
func (g *Gradient) Resume(limit int, baseline time.Duration) {
	g.limit = float64(min(max(limit, g.cfg.Min), g.cfg.Max))
	if baseline > 0 {
		g.baseline = float64(baseline)
	}
	g.probe.active = false
}
