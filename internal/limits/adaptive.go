package limits

import (
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/admit/limit"
	"github.com/leveeproxy/levee/internal/clock"
)

// StatusClientClosed is recorded (never sent) when the client went away
// before an answer, as nginx does.
const StatusClientClosed = 499

// Adaptive drives a concurrency limit from an adaptive algorithm: every
// finished request is a sample (its latency and the in-flight count it
// saw), and when the algorithm's limit moves, the limiter is told. The
// algorithm (internal/admit/limit) knows nothing of queues; the limiter
// knows nothing of latency. Safe for concurrent use.
type Adaptive struct {
	mu      sync.Mutex
	alg     limit.Algorithm
	cfg     limit.Config
	base    admit.Limits // the queue settings; Concurrency comes from alg
	limiter *admit.Limiter
	last    int     // the algorithm's limit
	factor  float64 // the owner's scale: the limiter gets last × factor
}

// NewAdaptive returns the controller of l for a gradient limit of c,
// setting l's limits to base with the algorithm's first limit × factor.
func NewAdaptive(c limit.Config, base admit.Limits, l *admit.Limiter, factor float64) *Adaptive {
	g, err := limit.NewGradient(c)
	if err != nil { // validated config: a broken invariant
		panic("limits: adaptive concurrency: " + err.Error())
	}
	return newAdaptive(g, c, base, l, factor)
}

func newAdaptive(alg limit.Algorithm, c limit.Config, base admit.Limits, l *admit.Limiter, factor float64) *Adaptive {
	a := &Adaptive{alg: alg, cfg: c, base: base, limiter: l, last: alg.Limit(), factor: factor}
	base.Concurrency = ScaleCount(a.last, factor)
	l.SetLimits(base)
	return a
}

// Config is the gradient configuration a was made for.
func (a *Adaptive) Config() limit.Config { return a.cfg }

// Algorithm is the algorithm a drives its limit from.
func (a *Adaptive) Algorithm() limit.Algorithm {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.alg
}

// SetAlgorithm replaces a's algorithm (a test's recorder, say); the
// limit stays until the new one moves it.
func (a *Adaptive) SetAlgorithm(alg limit.Algorithm) {
	a.mu.Lock()
	a.alg = alg
	a.mu.Unlock()
}

// SetBase changes the queue settings (on a reload) and the scale, keeping
// the learnt limit.
func (a *Adaptive) SetBase(base admit.Limits, factor float64) {
	a.mu.Lock()
	a.base, a.factor = base, factor
	base.Concurrency = ScaleCount(a.last, factor)
	a.mu.Unlock()
	a.limiter.SetLimits(base)
}

// observe feeds one finished request to the algorithm.
func (a *Adaptive) observe(now time.Time, rtt time.Duration, inflight int, failed bool) {
	a.mu.Lock()
	a.alg.Observe(now, rtt, inflight, failed)
	n := a.alg.Limit()
	changed := n != a.last
	a.last = n
	base := a.base
	base.Concurrency = ScaleCount(n, a.factor)
	a.mu.Unlock()
	if changed {
		a.limiter.SetLimits(base)
	}
}

// adaptiveSlot ends a request admitted under an adaptive limit: it
// releases the limiter's slot and reports the request to the algorithm.
type adaptiveSlot struct {
	a        *Adaptive
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
	s.a.limiter.ReleaseFor(s.t)
	if code == StatusClientClosed {
		// The client left before the backend answered (an HTTP/2 reset
		// before the request went out, say): its time says nothing of the
		// backend's, and a flood of them would read as a fast backend.
		return
	}
	now := s.clk.Now()
	s.a.observe(now, now.Sub(s.start), s.inflight, code >= 500)
}

// ticketSlot releases a slot taken with a client ticket.
type ticketSlot struct {
	l *admit.Limiter
	t admit.Ticket
}

func (s *ticketSlot) Release() { s.l.ReleaseFor(s.t) }
