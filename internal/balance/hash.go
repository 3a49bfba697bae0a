package balance

import (
	"errors"
	"math"
	"time"
)

// DefaultLoadFactor is c in consistent hashing with bounded load: no backend
// takes more than ⌈c · average⌉ of the requests in flight.
const DefaultLoadFactor = 1.25

// Hash is consistent hashing with bounded load (Mirrokni, Thorup,
// Zadimoghaddam 2018) over rendezvous (highest random weight) hashing: each
// key ranks the backends by score(key, backend) and goes to the
// highest-ranked healthy backend that is under its bound
//
//	cap_i = ⌈c · (m+1) · weight_i / Σ weight⌉
//
// where m is the number of requests in flight and the sum runs over healthy
// backends (Σ over healthy i of cap_i ≥ c·(m+1) > m, so one always has room),
// so one hot key spills to its next-ranked backends, a different order for
// every key, instead of overloading one. Weighted scores are
// −weight/ln(u) (Schindelhauer and Schomaker), which gives each backend a
// weight-proportional share of keys.
//
// Rendezvous over a ring: adding or removing one backend of N moves exactly
// the keys that rank it first, ~1/N with only sampling noise (a ring's
// movement also varies with its virtual-node layout); weights need no
// virtual nodes; the spill order is per key; and there is no ring to build or
// carry on reload. The price is O(N) per pick (see BenchmarkHashPick), fine
// for the tens of backends of an app. Scores use FNV-1a and a fixed mixer,
// so every levee instance maps a key the same way.
//
// Safe for concurrent use; Pick and Done do not allocate.
type Hash struct {
	set      *Set
	c        float64
	weighted bool
}

var _ Balancer = (*Hash)(nil)

// NewHash returns a Hash over s with load factor c; c = 0 means
// DefaultLoadFactor. c must be ≥ 1 and finite.
func NewHash(s *Set, c float64) (*Hash, error) {
	if c == 0 {
		c = DefaultLoadFactor
	}
	if !(c >= 1) || math.IsInf(c, 0) {
		return nil, errors.New("balance: hash load factor must be ≥ 1 and finite")
	}
	h := &Hash{set: s, c: c}
	for _, b := range s.backends {
		h.weighted = h.weighted || b.Weight() != s.backends[0].Weight()
	}
	return h, nil
}

// Set returns the Set h picks from.
func (h *Hash) Set() *Set { return h.set }

// Done reports the end of a request picked as backend i.
func (h *Hash) Done(i int, o Outcome, latency time.Duration, now time.Time) {
	h.set.Done(i, o, latency, now)
}

// Pick returns the index of the highest-ranked healthy backend for key that
// is under its bound, counting the request in flight there, or NoBackend.
func (h *Hash) Pick(key string, now time.Time) int {
	bs := h.set.backends
	var inflight, weights int64
	var healthy uint64 // bit i: backend i is healthy, for the first 64
	for i, b := range bs {
		if b.Healthy(now) {
			inflight += max(b.inflight.Load(), 0)
			weights += b.weight.Load()
			if i < 64 {
				healthy |= 1 << i
			}
		}
	}
	if weights == 0 {
		return NoBackend
	}
	k := hashString(key)
	bound := h.c * float64(inflight+1) / float64(weights)
	best, bestScore := NoBackend, -1.0
	spill, spillScore := NoBackend, -1.0 // best ignoring the bound (float rounding)
	for i, b := range bs {
		if i < 64 && healthy&(1<<i) == 0 || i >= 64 && !b.Healthy(now) {
			continue
		}
		s := h.score(k, b)
		if s > spillScore {
			spill, spillScore = i, s
		}
		if s > bestScore && float64(b.inflight.Load()) < math.Ceil(bound*float64(b.weight.Load())) {
			best, bestScore = i, s
		}
	}
	if best == NoBackend {
		best = spill
	}
	bs[best].begin()
	return best
}

// Lookup returns the backend that owns key when no load bound applies (the
// highest-ranked healthy one), without counting a request; NoBackend if
// none is healthy. For the admin API and tests.
func (h *Hash) Lookup(key string, now time.Time) int {
	k := hashString(key)
	best, bestScore := NoBackend, -1.0
	for i, b := range h.set.backends {
		if s := h.score(k, b); b.Healthy(now) && s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// score ranks b for key hash k; higher wins.
func (h *Hash) score(k uint64, b *Backend) float64 {
	x := mix64(k ^ b.seed)
	if !h.weighted {
		return float64(x >> 11) // 53 bits: exact in a float64
	}
	u := (float64(x>>11) + 0.5) / (1 << 53) // in (0, 1)
	return -float64(b.weight.Load()) / math.Log(u)
}

// hashString is 64-bit FNV-1a, finished with mix64 so that similar keys
// spread over all bits.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is the murmur3 64-bit finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb53a185ce2d3
	x ^= x >> 33
	return x
}
