package balance

import (
	"container/heap"
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
	now     time.Time
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

type completion struct {
	at      time.Time
	bal     Balancer
	i       int
	latency time.Duration
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at.Before(c[j].at) }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// newSim returns a simulation at a load that keeps about perBackend requests
// in flight on each of n backends of mean latency base.mean.
func newSim(seed uint64, n int, perBackend float64, base dist) *sim {
	return &sim{
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
		heap.Push(&s.pending, completion{at: s.now.Add(l), bal: bal, i: i, latency: l})
	}
	return counts
}

// complete runs every Done due by t, in time order.
func (s *sim) complete(t time.Time) {
	for len(s.pending) > 0 && !s.pending[0].at.After(t) {
		c := heap.Pop(&s.pending).(completion)
		c.bal.Done(c.i, OK, c.latency, c.at)
	}
}

// drain completes everything in flight.
func (s *sim) drain() {
	for len(s.pending) > 0 {
		s.now = s.pending[0].at
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
