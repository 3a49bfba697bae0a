package observe

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// newShadowVec is levee_shadow_rejected_total: the requests a shadowed
// limit let through that it would have refused. They are never in
// levee_rejected_total, which counts only what was refused.
func newShadowVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "levee_shadow_rejected_total",
		Help: shadowedHelp,
	}, []string{"app", "reason"})
}

// shadowCounter is one reason's counter child, with its count kept beside
// it so that it can be read without scraping.
type shadowCounter struct {
	prometheus.Counter
	n atomic.Uint64
}

// Shadowed counts a request that a shadowed limit would have refused for
// reason and let through.
func (a *AppMetrics) Shadowed(reason string) {
	byReason := made(&a.shadowed)
	c, ok := byReason.Load(reason)
	if !ok {
		c, _ = byReason.LoadOrStore(reason,
			&shadowCounter{Counter: a.bindCounter(a.m.shadowed, reason)})
	}
	sc := c.(*shadowCounter)
	sc.Inc()
	sc.n.Add(1)
	a.Live.Shadowed(reason, a.m.clk.Now())
}

// ShadowCounts returns how many requests each shadowed reason let through
// since the app's metrics were made (nil: none).
func (a *AppMetrics) ShadowCounts() map[string]uint64 {
	byReason := a.shadowed.Load()
	if byReason == nil {
		return nil
	}
	var counts map[string]uint64
	byReason.Range(func(k, v any) bool {
		if counts == nil {
			counts = map[string]uint64{}
		}
		counts[k.(string)] = v.(*shadowCounter).n.Load()
		return true
	})
	return counts
}
