package limits

import (
	"time"

	"github.com/leveeproxy/levee/internal/admit/limit"
)

// resumer is an algorithm that can continue from another's state.
type resumer interface {
	Stats() limit.Stats
	Resume(limit int, baseline time.Duration)
}

var _ resumer = (*limit.Gradient)(nil)

// Learnt is what a's algorithm has learnt: its limit (outside probes) and
// its long RTT, for the levee an upgrade starts (Resume). An algorithm
// that cannot hand over (a test's recorder) says ok false.
func (a *Adaptive) Learnt() (n int, baseline time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.alg.(resumer)
	if !ok {
		return 0, 0, false
	}
	st := r.Stats()
	return st.Limit, st.Baseline, true
}

// Resume continues from what another levee's algorithm learnt (Learnt),
// and puts the limit in force.
func (a *Adaptive) Resume(n int, baseline time.Duration) {
	a.mu.Lock()
	r, ok := a.alg.(resumer)
	if !ok {
		a.mu.Unlock()
		return
	}
	r.Resume(n, baseline)
	a.last = a.alg.Limit()
	base := a.base
	base.Concurrency = ScaleCount(a.last, a.factor)
	a.mu.Unlock()
	a.limiter.SetLimits(base)
}
