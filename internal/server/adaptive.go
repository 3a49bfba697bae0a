package server

import (
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/admit/limit"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
)

// adaptiveLimit drives an app's concurrency limit from an adaptive
// algorithm: every finished request is a sample (its latency and the
// in-flight count it saw), and when the algorithm's limit moves, the
// limiter is told. The algorithm (internal/admit/limit) knows nothing of
// queues; the limiter knows nothing of latency. Safe for concurrent use.
type adaptiveLimit struct {
	mu      sync.Mutex
	alg     limit.Algorithm
	cfg     config.Concurrency
	base    admit.Limits // the queue settings; Concurrency comes from alg
	limiter *admit.Limiter
	last    int     // the algorithm's limit
	factor  float64 // the server's scale: the limiter gets last × factor
}

// newAdaptiveLimit returns the controller for c (adaptive: gradient).
func newAdaptiveLimit(c config.Concurrency, base admit.Limits, l *admit.Limiter, factor float64) *adaptiveLimit {
	g, err := limit.NewGradient(limit.Config{Min: c.Min, Max: c.Max})
	if err != nil { // validated config: a broken invariant
		panic("server: adaptive concurrency: " + err.Error())
	}
	a := &adaptiveLimit{alg: g, cfg: c, base: base, limiter: l, last: g.Limit(), factor: factor}
	base.Concurrency = scaleCount(a.last, factor)
	l.SetLimits(base)
	return a
}

// setBase changes the queue settings on reload, and the scale, keeping
// the learnt limit.
func (a *adaptiveLimit) setBase(base admit.Limits, factor float64) {
	a.mu.Lock()
	a.base, a.factor = base, factor
	base.Concurrency = scaleCount(a.last, factor)
	a.mu.Unlock()
	a.limiter.SetLimits(base)
}

// observe feeds one finished request to the algorithm.
func (a *adaptiveLimit) observe(now time.Time, rtt time.Duration, inflight int, failed bool) {
	a.mu.Lock()
	a.alg.Observe(now, rtt, inflight, failed)
	n := a.alg.Limit()
	changed := n != a.last
	a.last = n
	base := a.base
	base.Concurrency = scaleCount(n, a.factor)
	a.mu.Unlock()
	if changed {
		a.limiter.SetLimits(base)
	}
}

// adaptiveSlot ends a request admitted under an adaptive limit: it
// releases the limiter's slot and reports the request to the algorithm.
type adaptiveSlot struct {
	a        *adaptiveLimit
	l        *admit.Limiter
	t        admit.Ticket
	clk      clock.Clock
	start    time.Time
	inflight int
}

// Release ends the request without a known status: not sampled as failed.
func (s *adaptiveSlot) Release() { s.ReleaseStatus(0) }

// ReleaseStatus ends the request that was answered code: a 5xx (levee's
// 502/504 included) is sampled as a failure.
func (s *adaptiveSlot) ReleaseStatus(code int) {
	s.l.ReleaseFor(s.t)
	if code == StatusClientClosed {
		// The client left before the backend answered (an HTTP/2 reset
		// before the request went out, say): its time says nothing of the
		// backend's, and a flood of them would read as a fast backend.
		return
	}
	now := s.clk.Now()
	s.a.observe(now, now.Sub(s.start), s.inflight, code >= 500)
}
