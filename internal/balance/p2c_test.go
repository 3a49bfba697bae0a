package balance

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDistinctNeverRepeatsAndIsUniform(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 2; n <= 60; n++ {
		for range 2_000 {
			i, j := distinct(r.Uint64(), n)
			if i == j || i < 0 || j < 0 || i >= n || j >= n {
				t.Fatalf("n=%d: distinct gave %d, %d", n, i, j)
			}
		}
	}
	var pairs [3][3]int
	const draws = 60_000
	for range draws {
		i, j := distinct(r.Uint64(), 3)
		pairs[i][j]++
	}
	for i := range 3 {
		for j := range 3 {
			if i != j && (pairs[i][j] < draws/6*95/100 || pairs[i][j] > draws/6*105/100) {
				t.Errorf("pair (%d,%d) drawn %d times of %d; want ~%d", i, j, pairs[i][j], draws, draws/6)
			}
		}
	}
}

// With two backends, sampling with replacement would send a quarter of the
// picks to the busier one (envoy #11004); distinct sampling never does.
func TestP2CTwoBackendsAlwaysPicksTheLessLoaded(t *testing.T) {
	now := time.Unix(0, 0)
	set := NewSet(specs("a", "b"), nil, now)
	p := NewP2C(set, rand.New(rand.NewPCG(1, 2)).Uint64)
	for range 5 {
		set.Backend(0).begin()
	}
	for range 1_000 {
		if i := p.Pick("", now); i != 1 {
			t.Fatalf("picked the busier backend")
		}
		p.Done(1, OK, time.Millisecond, now)
	}
}

func TestP2CHealth(t *testing.T) {
	now := time.Unix(100, 0)
	set := NewSet(specs("a", "b", "c"), nil, now)
	p := NewP2C(set, rand.New(rand.NewPCG(1, 2)).Uint64)
	set.Backend(0).SetHealthy(false)
	set.Backend(2).EjectUntil(now.Add(time.Minute))
	for range 100 {
		if i := p.Pick("", now); i != 1 {
			t.Fatalf("picked %d; want the one healthy backend 1", i)
		}
		p.Done(1, OK, time.Millisecond, now)
	}
	set.Backend(1).SetHealthy(false)
	if i := p.Pick("", now); i != NoBackend {
		t.Fatalf("picked %d with no healthy backend; want NoBackend", i)
	}
	later := now.Add(time.Minute) // the ejection of c ends
	seen := map[int]bool{}
	set.Backend(0).SetHealthy(true)
	for range 100 {
		i := p.Pick("", later)
		seen[i] = true
		p.Done(i, OK, time.Millisecond, later)
	}
	if !seen[0] || !seen[2] || seen[1] {
		t.Fatalf("after recovery picked %v; want 0 and 2 only", seen)
	}
	if i := NewP2C(NewSet(nil, nil, now), nil).Pick("", now); i != NoBackend {
		t.Fatalf("empty set picked %d", i)
	}
}

// A cold backend whose first requests were slow (new connections) is not
// starved: until its latency is established it competes on load alone.
func TestP2CDoesNotStarveAColdBackend(t *testing.T) {
	now := time.Unix(0, 0)
	set := NewSet(specs("a", "b"), nil, now)
	for range 100 {
		set.Done(set.begin(0), OK, time.Millisecond, now)
	}
	set.Done(set.begin(1), OK, 50*time.Millisecond, now) // one slow first sample
	set.begin(0)                                         // a has one in flight
	if i := NewP2C(set, nil).Pick("", now); i != 1 {
		t.Fatalf("picked %d; want the idle cold backend b despite its one slow sample", i)
	}
}

func TestP2CAvoidsSlowBackendOutsideTolerance(t *testing.T) {
	now := time.Unix(0, 0)
	set := NewSet(specs("fast", "slow"), nil, now)
	p := NewP2C(set, rand.New(rand.NewPCG(1, 2)).Uint64)
	for range MinLatencySamples { // latency counts once it is established
		set.Done(set.begin(0), OK, 10*time.Millisecond, now)
		set.Done(set.begin(1), OK, 40*time.Millisecond, now)
	}
	// fast with 2 in flight: cost 3×10 ms < slow's 1×40 ms.
	set.begin(0)
	set.begin(0)
	if i := p.Pick("", now); i != 0 {
		t.Fatalf("picked %d; want fast (3×10ms < 1×40ms)", i)
	}
	// Within tolerance (10 vs 14 ms) only load counts.
	set2 := NewSet(specs("x", "y"), nil, now)
	set2.Done(set2.begin(0), OK, 10*time.Millisecond, now)
	set2.Done(set2.begin(1), OK, 14*time.Millisecond, now)
	set2.begin(0)
	if i := NewP2C(set2, nil).Pick("", now); i != 1 {
		t.Fatalf("picked %d; want the idle backend when latencies are within tolerance", i)
	}
}

// begin picks backend i by hand (tests only).
func (s *Set) begin(i int) int { s.backends[i].begin(); return i }
