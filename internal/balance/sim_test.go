package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// sim is a discrete-event simulation of one proxy in front of backends
// whose latencies are drawn from log-normal distributions: requests arrive
// as a Poisson process, each is picked by a Balancer and completes
// (Done) after its backend's latency, all on a simulated clock. It uses no
// goroutines and no real time, so every figure is a function of the seed.
type sim struct {
	start   time.Time
	now     time.Time
	bals    []Balancer // every Balancer that has picked, for pending Dones
	rng     *rand.Rand
	rate    float64         // arrivals per second
	latency map[string]dist // by backend ID; missing means base
	base    dist
	pending completions
}

// dist is a log-normal latency with the given mean and shape σ.
type dist struct {
	mean  time.Duration
	sigma float64
}

func (d dist) draw(r *rand.Rand) time.Duration {
	return time.Duration(float64(d.mean) * math.Exp(d.sigma*r.NormFloat64()-d.sigma*d.sigma/2))
}

// completion is one pending Done, kept small: heap swaps copy it.
type completion struct {
	at      int64 // ns since sim.start
	latency int64 // ns
	i       int32
	bal     int32 // index into sim.bals
}

// completions is a binary min-heap by time (typed: no boxing per event).
type completions []completion

func (c *completions) push(x completion) {
	h := append(*c, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[i].at >= h[p].at {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*c = h
}

func (c *completions) pop() completion {
	h := *c
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].at < h[m].at {
			m = l
		}
		if r := l + 1; r < n && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*c = h
	return top
}

// newSim returns a simulation at a load that keeps about perBackend requests
// in flight on each of n backends of mean latency base.mean.
func newSim(seed uint64, n int, perBackend float64, base dist) *sim {
	return &sim{
		start:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		now:     time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		rng:     rand.New(rand.NewPCG(seed, 0x1e7ee)),
		rate:    float64(n) * perBackend / base.mean.Seconds(),
		latency: map[string]dist{},
		base:    base,
	}
}

// run sends requests through bal and returns how many each backend index
// got. key, if not nil, gives each request's hash key. check, if not nil,
// runs after every pick.
func (s *sim) run(bal Balancer, requests int, key func() string, check func(i int)) []int {
	counts := make([]int, bal.Set().Len())
	if len(s.bals) == 0 || s.bals[len(s.bals)-1] != bal {
		s.bals = append(s.bals, bal)
	}
	b := int32(len(s.bals) - 1)
	for range requests {
		s.now = s.now.Add(time.Duration(s.rng.ExpFloat64() / s.rate * float64(time.Second)))
		s.complete(s.now)
		k := ""
		if key != nil {
			k = key()
		}
		i := bal.Pick(k, s.now)
		if i == NoBackend {
			panic("no backend")
		}
		counts[i]++
		if check != nil {
			check(i)
		}
		d, ok := s.latency[bal.Set().Backend(i).ID()]
		if !ok {
			d = s.base
		}
		l := d.draw(s.rng)
		s.pending.push(completion{at: int64(s.now.Sub(s.start) + l), latency: int64(l), i: int32(i), bal: b})
	}
	return counts
}

// complete runs every Done due by t, in time order.
func (s *sim) complete(t time.Time) {
	due := int64(t.Sub(s.start))
	for len(s.pending) > 0 && s.pending[0].at <= due {
		c := s.pending.pop()
		s.bals[c.bal].Done(int(c.i), OK, time.Duration(c.latency), s.start.Add(time.Duration(c.at)))
	}
}

// drain completes everything in flight.
func (s *sim) drain() {
	for len(s.pending) > 0 {
		s.now = s.start.Add(time.Duration(s.pending[0].at))
		s.complete(s.now)
	}
}

func specs(ids ...string) []Spec {
	out := make([]Spec, len(ids))
	for i, id := range ids {
		out[i] = Spec{ID: id, Weight: 1}
	}
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d:80", prefix, i)
	}
	return out
}

// imbalance is max/mean of counts, weight-normalised, all backends healthy.
func imbalance(counts []int, weights []int) float64 {
	shares := make([]Share, len(counts))
	for i, c := range counts {
		w := 1
		if weights != nil {
			w = weights[i]
		}
		shares[i] = Share{Weight: w, Healthy: true, Requests: uint64(c)}
	}
	return Imbalance(shares)
}
