package balance

import (
	"math/rand/v2"
	"time"
)

// LatencyTolerance is the ratio within which two backends' latency averages
// count as equal in P2C: inside it the less loaded backend wins, outside it
// the latency multiplies the load. Without this band, statistical noise
// between identical backends (a few percent) decides every light-load
// comparison and skews the distribution; a backend 1.5x slower than its
// peers is still seen, through its in-flight count (Little's law).
const LatencyTolerance = 1.5

// P2C is power of two choices: it samples two distinct healthy backends
// uniformly and picks the one with the lower cost,
//
//	cost = (inflight+1) / weight              if their latencies are within LatencyTolerance
//	cost = (inflight+1) / weight × latency    otherwise
//
// where latency is the backend's decayed EWMA ([Backend.Latency]); a backend
// with fewer than MinLatencySamples samples counts as within tolerance. Ties go to the first draw,
// which is random. Safe for concurrent use; Pick and Done do not allocate.
type P2C struct {
	set  *Set
	rand func() uint64
}

var _ Balancer = (*P2C)(nil)

// NewP2C returns a P2C over s. rand supplies uniform 64-bit numbers and must
// be safe for concurrent use if Pick is; nil means math/rand/v2's runtime
// source. Tests pass a seeded source, e.g. rand.New(rand.NewPCG(1, 2)).Uint64.
func NewP2C(s *Set, rand func() uint64) *P2C {
	if rand == nil {
		rand = randUint64
	}
	return &P2C{set: s, rand: rand}
}

func randUint64() uint64 { return rand.Uint64() }

// Set returns the Set p picks from.
func (p *P2C) Set() *Set { return p.set }

// Done reports the end of a request picked as backend i.
func (p *P2C) Done(i int, o Outcome, latency time.Duration, now time.Time) {
	p.set.Done(i, o, latency, now)
}

// Pick returns the index of the chosen backend and counts the request in
// flight there, or NoBackend if none is healthy. key is ignored.
func (p *P2C) Pick(_ string, now time.Time) int {
	bs := p.set.backends
	n := len(bs)
	switch n {
	case 0:
		return NoBackend
	case 1:
		if !bs[0].Healthy(now) {
			return NoBackend
		}
		bs[0].begin()
		return 0
	}
	i, j := distinct(p.rand(), n)
	a, b := bs[i], bs[j]
	ta, tb := a.since(now), b.since(now)
	if !a.healthyAt(ta) || !b.healthyAt(tb) {
		i = p.pickSlow(now)
		if i != NoBackend {
			bs[i].begin()
		}
		return i
	}
	if p.less(b, a, tb, ta) {
		i = j
	}
	bs[i].begin()
	return i
}

// less reports whether a costs less than b.
func (p *P2C) less(a, b *Backend, ta, tb int64) bool {
	ca := float64(a.inflight.Load()+1) / float64(a.weight.Load())
	cb := float64(b.inflight.Load()+1) / float64(b.weight.Load())
	la, lb := a.latencyAt(ta), b.latencyAt(tb)
	if a.trusted.Load() && b.trusted.Load() && la > 0 && lb > 0 && (la > lb*LatencyTolerance || lb > la*LatencyTolerance) {
		ca, cb = ca*la, cb*lb
	}
	return ca < cb
}

// pickSlow runs when a sampled backend is unhealthy: it counts the healthy
// ones and draws two distinct among them (O(n), without allocating).
func (p *P2C) pickSlow(now time.Time) int {
	bs := p.set.backends
	h := 0
	for _, b := range bs {
		if b.Healthy(now) {
			h++
		}
	}
	switch h {
	case 0:
		return NoBackend
	case 1:
		return nthHealthy(bs, 0, now)
	}
	x, y := distinct(p.rand(), h)
	i, j := nthHealthy(bs, x, now), nthHealthy(bs, y, now)
	switch {
	case i == NoBackend || j == NoBackend || i == j: // health changed meanwhile
		return max(i, j)
	case p.less(bs[j], bs[i], bs[j].since(now), bs[i].since(now)):
		return j
	}
	return i
}

// nthHealthy returns the index of the k-th healthy backend, or NoBackend.
func nthHealthy(bs []*Backend, k int, now time.Time) int {
	for i, b := range bs {
		if b.Healthy(now) {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return NoBackend
}

// distinct maps one 64-bit random number to two distinct indices in [0, n),
// n ≥ 2, each pair equally likely (up to 2⁻³² bias): the low half picks i
// among n, the high half j among the other n−1 (envoy #11004: sampling with
// replacement degrades to one choice).
func distinct(r uint64, n int) (int, int) {
	i := int((r & 0xffffffff) * uint64(n) >> 32)
	j := int((r >> 32) * uint64(n-1) >> 32)
	if j >= i {
		j++
	}
	return i, j
}
