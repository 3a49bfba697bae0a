package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func hashKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i)
	}
	return keys
}

func TestGateHashRemapsOnlyOneNth(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	keys := hashKeys(20_000)
	for _, n := range []int{2, 3, 5, 10, 20, 50} {
		ids := names("10.0.0.", n+1)
		small, _ := NewHash(NewSet(specs(ids[:n]...), nil, now), 0)
		big, _ := NewHash(NewSet(specs(ids...), nil, now), 0)
		moved := 0
		for _, k := range keys {
			a, b := small.Lookup(k, now), big.Lookup(k, now)
			if a != b {
				moved++
				if b != n {
					t.Fatalf("N=%d: key %q moved from %d to %d, not to the new backend", n, k, a, b)
				}
			}
		}
		frac, limit := float64(moved)/float64(len(keys)), 1.2/float64(n+1)
		t.Logf("hash %d → %d backends: %.4f of %d keys remapped (1/(N+1) = %.4f, limit %.4f)", n, n+1, frac, len(keys), 1/float64(n+1), limit)
		if frac > limit {
			t.Errorf("N=%d: %.4f of keys remapped; want ≤ %.4f", n, frac, limit)
		}
	}
}

func TestHashSharesFollowWeights(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	sp := []Spec{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 1}, {"e", 5}}
	h, _ := NewHash(NewSet(sp, nil, now), 0)
	counts := make([]int, len(sp))
	for _, k := range hashKeys(50_000) {
		counts[h.Lookup(k, now)]++
	}
	weights := []int{1, 2, 3, 1, 5}
	got := imbalance(counts, weights)
	t.Logf("hash, weights %v, 50000 keys: counts %v, weight-normalised max/mean %.4f", weights, counts, got)
	if got > maxImbalance {
		t.Errorf("weight-normalised max/mean %.4f > %.2f", got, maxImbalance)
	}
}

// TestGateHashBoundedLoad sends Zipf-skewed keys (s = 1.1 over 10k keys:
// the hottest key alone is ~13% of requests, 1.3x a backend's fair share)
// through the simulation and checks the bound at every pick: the chosen
// backend has at most ⌈c·m/n⌉ requests in flight, m the total in flight. An
// unbounded run shows what the bound prevents.
func TestGateHashBoundedLoad(t *testing.T) {
	t.Parallel()
	const n, requests = 10, 50_000
	for _, c := range []float64{DefaultLoadFactor, 1e9} {
		s := newSim(3, n, gateLoad, gateLatency)
		set := NewSet(specs(names("10.0.0.", n)...), nil, s.now)
		h, err := NewHash(set, c)
		if err != nil {
			t.Fatal(err)
		}
		zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 9)), 1.1, 1, 9_999)
		keys := hashKeys(10_000)
		var worst float64 // max over picks of inflight(chosen) / ⌈1.25·m/n⌉
		violations, hot := 0, 0
		key := func() string {
			k := zipf.Uint64()
			if k == 0 {
				hot++
			}
			return keys[k]
		}
		counts := s.run(h, requests, key, func(i int) {
			var m int64
			for j := range set.Len() {
				m += set.Backend(j).InFlight()
			}
			in, bound := set.Backend(i).InFlight(), math.Ceil(DefaultLoadFactor*float64(m)/n)
			worst = max(worst, float64(in)/bound)
			if float64(in) > bound {
				violations++
			}
		})
		t.Logf("hash c=%g, %d backends, Zipf(1.1) keys, hottest key %.1f%% of requests: max in-flight/⌈1.25·avg⌉ at pick %.2f, picks above ⌈1.25·avg⌉ %d, request max/mean share %.3f",
			c, n, 100*float64(hot)/requests, worst, violations, imbalance(counts, nil))
		if c == DefaultLoadFactor && violations > 0 {
			t.Errorf("c=%g: %d picks put a backend above ⌈c·avg⌉ in flight (worst %.2f × avg)", c, violations, worst)
		}
		if c > 1e6 && violations == 0 {
			t.Errorf("unbounded hashing never exceeded the bound: the test has no power")
		}
	}
}
