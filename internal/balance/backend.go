package balance

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// EWMADecay is τ, the time constant of a backend's latency average. A sample
// that arrives Δt after the previous one gets weight 1−exp(−Δt/τ), so the
// average covers about the last τ of traffic whatever the request rate, and
// a backend that receives nothing drifts toward zero (and so is probed
// again) with half-life τ·ln 2 ≈ 6.9 s. See [Backend.Latency].
const EWMADecay = 10 * time.Second

// MinLatencySamples is how many latency samples a backend needs before P2C
// weighs its latency. Fewer samples (a cold backend whose first requests
// paid for new connections) would stand for a whole EWMADecay and starve a
// healthy backend; until then it is balanced on in-flight requests alone,
// which soon gives it the samples that correct the average.
const MinLatencySamples = 16

// Outcome is how a picked request ended, as reported to Done.
type Outcome uint8

const (
	// OK means the backend answered; its latency is a sample of the average.
	OK Outcome = iota
	// Failed means a connect error, timeout or 5xx. The sample counts at
	// least double the current average, at once (not blended), so a backend
	// that fails fast does not look fast and attract traffic; it also counts
	// toward [Backend.ConsecutiveFailures].
	Failed
	// Canceled means the client went away: the request leaves the in-flight
	// count but says nothing about the backend.
	Canceled
)

// Spec describes one backend of a Set. ID (the address) identifies the
// backend across reloads; Weight < 1 counts as 1.
type Spec struct {
	ID     string
	Weight int
}

// Backend is the live state of one backend, shared by every policy and
// carried across reloads by [NewSet]. All methods are safe for concurrent
// use; Pick and Done never take a lock except Done's latency update, which
// takes this backend's own mutex.
type Backend struct {
	id   string
	seed uint64 // rendezvous hash of id, fixed for the process and across instances

	inflight    atomic.Int64
	requests    atomic.Uint64
	failures    atomic.Uint64
	consecutive atomic.Uint32
	weight      atomic.Int64
	down        atomic.Bool  // active health check says unhealthy
	ejectedTill atomic.Int64 // ns since epoch; passive ejection until then

	epoch   time.Time // origin of the ns timestamps below (monotonic when real)
	mu      sync.Mutex
	samples uint64        // latency samples so far, guarded by mu
	trusted atomic.Bool   // samples ≥ MinLatencySamples: P2C may weigh latency
	ewma    float64       // guarded by mu; published in cost
	last    int64         // guarded by mu; published in stamp
	cost    atomic.Uint64 // float64 bits: EWMA latency in ns as of stamp
	stamp   atomic.Int64  // ns since epoch of the last sample
}

func newBackend(s Spec, now time.Time) *Backend {
	b := &Backend{id: s.ID, seed: hashString(s.ID), epoch: now}
	b.weight.Store(int64(max(s.Weight, 1)))
	return b
}

// ID returns the backend's identity (its address).
func (b *Backend) ID() string { return b.id }

// Weight returns the configured weight (≥ 1).
func (b *Backend) Weight() int { return int(b.weight.Load()) }

// InFlight returns the number of picked requests not yet Done.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// Requests returns the number of times the backend was picked, ever.
func (b *Backend) Requests() uint64 { return b.requests.Load() }

// Failures returns the number of Failed outcomes, ever.
func (b *Backend) Failures() uint64 { return b.failures.Load() }

// ConsecutiveFailures returns the Failed outcomes since the last OK; an
// outlier detector ejects on it.
func (b *Backend) ConsecutiveFailures() int { return int(b.consecutive.Load()) }

// SetHealthy records the verdict of an active health check.
func (b *Backend) SetHealthy(ok bool) { b.down.Store(!ok) }

// EjectUntil takes the backend out of rotation until t (passive outlier
// ejection); a zero t ends an ejection.
func (b *Backend) EjectUntil(t time.Time) {
	if t.IsZero() {
		b.ejectedTill.Store(0)
		return
	}
	b.ejectedTill.Store(int64(t.Sub(b.epoch)))
}

// Healthy reports whether the backend may be picked at now: the health check
// passes and no ejection is running.
func (b *Backend) Healthy(now time.Time) bool {
	if b.down.Load() {
		return false
	}
	e := b.ejectedTill.Load()
	return e == 0 || b.since(now) >= e
}

func (b *Backend) healthyAt(t int64) bool {
	e := b.ejectedTill.Load()
	return !b.down.Load() && (e == 0 || t >= e)
}

func (b *Backend) since(now time.Time) int64 { return int64(now.Sub(b.epoch)) }

// Latency returns the decayed EWMA of latency at now:
//
//	L(now) = L(stamp) · exp(−(now−stamp)/τ)
//
// and on each sample x at time t, with w = exp(−(t−stamp)/τ):
//
//	L(t) = L(stamp)·w + x·(1−w)
//
// (Finagle's and Linkerd's time-decayed form, τ = [EWMADecay]), except that
// the k-th sample weighs at least 1/k: the first samples form a plain mean,
// so one outlier at start-up does not stand for τ. Zero means no sample yet. It reads two atomics without a lock; a torn read during a
// concurrent Done returns a value between the old and new averages.
func (b *Backend) Latency(now time.Time) time.Duration {
	return time.Duration(b.latencyAt(b.since(now)))
}

func (b *Backend) latencyAt(t int64) float64 {
	c := math.Float64frombits(b.cost.Load())
	if c == 0 {
		return 0
	}
	if dt := t - b.stamp.Load(); dt > 0 {
		c *= math.Exp(-float64(dt) / float64(EWMADecay))
	}
	return c
}

// begin counts a pick.
func (b *Backend) begin() {
	b.inflight.Add(1)
	b.requests.Add(1)
}

// done ends a pick begun by begin.
func (b *Backend) done(o Outcome, latency time.Duration, now time.Time) {
	b.inflight.Add(-1)
	switch o {
	case OK:
		if b.consecutive.Load() != 0 {
			b.consecutive.Store(0)
		}
		b.observe(b.since(now), float64(max(latency, 0)), false)
	case Failed:
		b.failures.Add(1)
		b.consecutive.Add(1)
		b.observe(b.since(now), float64(max(latency, 0)), true)
	}
}

func (b *Backend) observe(t int64, x float64, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.ewma
	w := math.Exp(-float64(max(t-b.last, 0)) / float64(EWMADecay))
	if failed {
		c = max(2*c*w, x)
	} else {
		b.samples++
		if b.samples >= MinLatencySamples {
			b.trusted.Store(true)
		}
		a := max(1-w, 1/float64(b.samples))
		c = c*(1-a) + x*a
	}
	b.publish(c, max(t, b.last))
}

// publish sets the average; b.mu is held.
func (b *Backend) publish(c float64, t int64) {
	b.ewma, b.last = c, t
	b.cost.Store(math.Float64bits(c))
	b.stamp.Store(t)
}

// warm starts a backend with no samples at latency l (the pool's mean), so a
// new backend is neither flooded nor starved while its first samples arrive.
func (b *Backend) warm(l float64, t int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ewma == 0 && l > 0 {
		b.publish(l, t)
		b.samples = 1 // the prior counts as one sample
	}
}

// Set is the backends of one app for one config snapshot. It is immutable
// after NewSet; the backends' state is live and shared with other Sets built
// from it.
type Set struct {
	backends []*Backend
}

// NewSet returns a Set over specs. A backend whose ID is also in prev is
// carried over: same *Backend, so its in-flight count, latency average,
// counters and health continue, and Done calls from requests picked under
// prev still land on it; only its weight is updated. New backends start with
// the mean latency of the carried ones. prev may be nil. Duplicate IDs share
// one Backend.
func NewSet(specs []Spec, prev *Set, now time.Time) *Set {
	old := map[string]*Backend{}
	if prev != nil {
		for _, b := range prev.backends {
			old[b.id] = b
		}
	}
	var sum float64
	var n int
	s := &Set{backends: make([]*Backend, 0, len(specs))}
	var fresh []*Backend
	for _, sp := range specs {
		b, ok := old[sp.ID]
		if ok {
			b.weight.Store(int64(max(sp.Weight, 1)))
			if l := b.latencyAt(b.since(now)); l > 0 {
				sum, n = sum+l, n+1
			}
		} else {
			b = newBackend(sp, now)
			old[sp.ID] = b
			fresh = append(fresh, b)
		}
		s.backends = append(s.backends, b)
	}
	if n > 0 {
		for _, b := range fresh {
			b.warm(sum/float64(n), b.since(now))
		}
	}
	return s
}

// Len returns the number of backends.
func (s *Set) Len() int { return len(s.backends) }

// Backend returns backend i, 0 ≤ i < Len().
func (s *Set) Backend(i int) *Backend { return s.backends[i] }

// Done reports the end of a request picked as backend i of s: outcome,
// latency (time to the response's end), and now. Call it exactly once per
// successful Pick, on the Balancer (or Set) that picked.
func (s *Set) Done(i int, o Outcome, latency time.Duration, now time.Time) {
	s.backends[i].done(o, latency, now)
}
