package limit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// phase is a span of simulated time with a fixed backend and offered load.
type phase struct {
	name     string
	dur      time.Duration
	capacity int           // C: requests the backend serves at once
	service  time.Duration // service time of one request
	offered  int           // requests the callers would keep in flight (closed loop)
	spike    func(t time.Duration) float64
}

// sim drives an Algorithm with a fluid model of a backend: with I requests in flight each takes
// service·max(1, I/C) (beyond C they queue inside the backend), so completions arrive at
// I/latency per unit of time. The callers keep min(limit, offered) requests in flight. Each RTT
// carries a deterministic ±jitter. Time is simulated in steps of dt; no goroutines, no sleeps.
type sim struct {
	alg    Algorithm
	jitter float64
	rng    *rand.Rand
	now    time.Time
	start  time.Time
	trace  []point
}

type point struct {
	at       time.Duration
	limit    int // the algorithm's limit, outside of probes
	enforced int // what Limit() returned: lower during a probe
	phase    int
}

const dt = time.Millisecond

func newSim(alg Algorithm, jitter float64) *sim {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return &sim{alg: alg, jitter: jitter, rng: rand.New(rand.NewPCG(1, 2)), now: t0, start: t0}
}

func (s *sim) run(phases []phase) {
	credit := 0.0
	for pi, p := range phases {
		end := s.now.Add(p.dur)
		for s.now.Before(end) {
			inflight := min(s.alg.Limit(), p.offered)
			load := max(1, float64(inflight)/float64(p.capacity))
			lat := float64(p.service) * load
			if p.spike != nil {
				lat *= p.spike(s.now.Sub(s.start))
			}
			credit += float64(inflight) * float64(dt) / lat
			s.now = s.now.Add(dt)
			for ; credit >= 1; credit-- {
				noise := 1 + s.jitter*(2*s.rng.Float64()-1)
				s.alg.Observe(s.now, time.Duration(lat*noise), inflight, false)
			}
			if at := s.now.Sub(s.start); at%(10*time.Millisecond) == 0 {
				s.trace = append(s.trace, point{at, s.steady(), s.alg.Limit(), pi})
			}
		}
	}
}

// steady is the algorithm's limit outside of probes.
func (s *sim) steady() int {
	if g, ok := s.alg.(*Gradient); ok {
		return g.Stats().Limit
	}
	return s.alg.Limit()
}

// probing returns the fraction of phase pi's time in (from, to] spent in probes and the lowest
// limit enforced then.
func (s *sim) probing(pi int, from, to time.Duration) (frac float64, lowest int) {
	n, in := 0, 0
	lowest = 1 << 30
	for _, p := range s.trace {
		if p.phase == pi && p.at > from && p.at <= to {
			n++
			lowest = min(lowest, p.enforced)
			if p.enforced < p.limit {
				in++
			}
		}
	}
	return float64(in) / float64(n), lowest
}

// span returns the min, mean and max limit of phase pi over its last `last` of time.
func (s *sim) span(pi int, from, to time.Duration) (lo int, mean float64, hi int) {
	lo, n, sum := 1<<30, 0, 0
	for _, p := range s.trace {
		if p.phase == pi && p.at > from && p.at <= to {
			lo, hi = min(lo, p.limit), max(hi, p.limit)
			sum += p.limit
			n++
		}
	}
	return lo, float64(sum) / float64(n), hi
}

// summary is the trajectory, one limit per `every`, for the test log.
func (s *sim) summary(every time.Duration) string {
	var b strings.Builder
	for _, p := range s.trace {
		if p.at%every == 0 {
			fmt.Fprintf(&b, " %v:%d", p.at.Round(time.Second), p.limit)
		}
	}
	return b.String()
}

func newGradientT(t testing.TB, c Config) *Gradient {
	t.Helper()
	g, err := NewGradient(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// checkBand asserts that, once settled, a phase's limit stays within [loF·C, hiF·C], and that
// over the whole phase it never falls below floorF·C.
func checkBand(t *testing.T, s *sim, phases []phase, settle time.Duration, loF, hiF, floorF float64) {
	t.Helper()
	var at time.Duration
	for pi, p := range phases {
		c := float64(p.capacity)
		lo, mean, hi := s.span(pi, at+settle, at+p.dur)
		whole, _, _ := s.span(pi, at, at+p.dur)
		frac, enforced := s.probing(pi, at, at+p.dur)
		t.Logf("%-10s C=%-3d service=%-5v settled limit min/mean/max = %d/%.1f/%d (%.2f·C), phase min %d, lowest enforced %d, probing %.1f%% of the time",
			p.name, p.capacity, p.service, lo, mean, hi, mean/c, whole, enforced, 100*frac)
		if float64(lo) < loF*c || float64(hi) > hiF*c {
			t.Errorf("%s: settled limit in [%d, %d], want within [%.0f, %.0f]", p.name, lo, hi, loF*c, hiF*c)
		}
		if pi > 0 && float64(enforced) < floorF*c {
			t.Errorf("%s: enforced limit fell to %d, below %.0f", p.name, enforced, floorF*c)
		}
		at += p.dur
	}
}

// The band: Gradient2 settles where the gradient equals 1 − q/limit, a standing queue of
// q = max(4, √limit) above the knee: limit ≈ C + √C, 57 for C = 50 (1.14·C) and 30 for C = 25
// (1.2·C). Jitter moves window means by well under 1%. [0.9·C, 1.4·C] allows for both while
// failing an algorithm that drifts, overshoots into the backend queue, or under-uses capacity.
func TestGradientTracksCapacity(t *testing.T) {
	const over = 1000 // offered load: 20x capacity
	phases := []phase{
		{name: "capacity", dur: 30 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: over},
		{name: "halved", dur: 30 * time.Second, capacity: 25, service: 10 * time.Millisecond, offered: over},
		{name: "restored", dur: 30 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: over},
		{name: "long run", dur: 120 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: over},
	}
	g := newGradientT(t, Config{Min: 8, Max: 1024})
	s := newSim(g, 0.3)
	s.run(phases)
	t.Logf("trajectory (limit every 2s):%s", s.summary(2*time.Second))
	t.Logf("stats: %+v", g.Stats())
	checkBand(t, s, phases, 10*time.Second, 0.9, 1.4, 0.45)
	if st := g.Stats(); st.Rebases != 0 {
		t.Errorf("rebased %d times; capacity changes are queueing and must not move the baseline", st.Rebases)
	}
}

func TestGradientLargeCapacity(t *testing.T) {
	phases := []phase{
		{name: "C=500", dur: 60 * time.Second, capacity: 500, service: 20 * time.Millisecond, offered: 5000},
		{name: "C=250", dur: 60 * time.Second, capacity: 250, service: 20 * time.Millisecond, offered: 5000},
		{name: "C=500", dur: 60 * time.Second, capacity: 500, service: 20 * time.Millisecond, offered: 5000},
	}
	g := newGradientT(t, Config{Min: 8, Max: 1024})
	s := newSim(g, 0.3)
	s.run(phases)
	t.Logf("trajectory (limit every 5s):%s", s.summary(5*time.Second))
	checkBand(t, s, phases, 30*time.Second, 0.9, 1.4, 0.45)
}

// A backend that becomes slower at the same concurrency (service 10ms → 25ms) looks, at first,
// like queueing. Gradient must re-measure its baseline without starving: the limit may dip
// while it gathers evidence, but never to Min, and returns to the knee.
func TestGradientRebaseDoesNotCollapse(t *testing.T) {
	phases := []phase{
		{name: "fast", dur: 30 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: 1000},
		{name: "slow", dur: 30 * time.Second, capacity: 50, service: 25 * time.Millisecond, offered: 1000},
		{name: "fast again", dur: 30 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: 1000},
	}
	g := newGradientT(t, Config{Min: 8, Max: 1024})
	s := newSim(g, 0.3)
	s.run(phases)
	t.Logf("trajectory (limit every 1s):%s", s.summary(time.Second))
	t.Logf("stats: %+v", g.Stats())
	checkBand(t, s, phases, 15*time.Second, 0.9, 1.4, 0.45)
	if g.Stats().Rebases == 0 {
		t.Error("no rebase: the baseline never learnt the slower backend")
	}
}

// Short latency spikes (5x for 200ms every 3s: GC pauses, a noisy neighbour) must cost a
// little concurrency, not the floor.
func TestGradientLatencySpikes(t *testing.T) {
	spike := func(at time.Duration) float64 {
		if at > 10*time.Second && at%(3*time.Second) < 200*time.Millisecond {
			return 5
		}
		return 1
	}
	phases := []phase{
		{name: "spiky", dur: 60 * time.Second, capacity: 50, service: 10 * time.Millisecond, offered: 1000, spike: spike},
	}
	g := newGradientT(t, Config{Min: 8, Max: 1024})
	s := newSim(g, 0.3)
	s.run(phases)
	t.Logf("trajectory (limit every 1s):%s", s.summary(time.Second))
	lo, mean, hi := s.span(0, 10*time.Second, 60*time.Second)
	_, enforced := s.probing(0, 10*time.Second, 60*time.Second)
	t.Logf("after 10s: limit min/mean/max = %d/%.1f/%d, lowest enforced %d, stats %+v", lo, mean, hi, enforced, g.Stats())
	if lo < 40 || hi > 70 || enforced < 35 {
		t.Errorf("limit in [%d, %d], enforced ≥ %d with spikes, want within [40, 70], enforced ≥ 35", lo, hi, enforced)
	}
}
