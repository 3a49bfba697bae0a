package ratelimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t testing.TB, o Options) *LocalStore {
	t.Helper()
	s, err := NewLocalStore(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// step is one request in a script: at t0+at, n units of key.
type step struct {
	at   time.Duration
	n    int
	want Decision
}

func runSteps(t *testing.T, s *LocalStore, key string, lim Limit, steps []step) {
	t.Helper()
	for i, st := range steps {
		if got := s.AllowAt(key, lim, t0.Add(st.at), st.n); got != st.want {
			t.Errorf("step %d: at %v n=%d: got %+v, want %+v", i, st.at, st.n, got, st.want)
		}
	}
}

func TestGCRABoundary(t *testing.T) {
	ms := time.Millisecond
	lim := Limit{Interval: 100 * ms, Burst: 3}
	runSteps(t, newStore(t, Options{MaxKeys: 64}), "k", lim, []step{
		{0, 1, Decision{Allowed: true, Remaining: 2, Reset: 100 * ms}},
		{0, 1, Decision{Allowed: true, Remaining: 1, Reset: 200 * ms}},
		{0, 1, Decision{Allowed: true, Remaining: 0, Reset: 300 * ms}}, // burst exactly
		{0, 1, Decision{RetryAfter: 100 * ms, Remaining: 0, Reset: 300 * ms}},
		{100*ms - 1, 1, Decision{RetryAfter: 1, Remaining: 0, Reset: 200*ms + 1}},
		{100 * ms, 1, Decision{Allowed: true, Remaining: 0, Reset: 300 * ms}},
		{100 * ms, 2, Decision{RetryAfter: 200 * ms, Remaining: 0, Reset: 300 * ms}},
		{300*ms - 1, 2, Decision{RetryAfter: 1, Remaining: 1, Reset: 100*ms + 1}}, // one single request would pass
		{300 * ms, 2, Decision{Allowed: true, Remaining: 0, Reset: 300 * ms}},
		{900 * ms, 0, Decision{Allowed: true, Remaining: 3, Reset: 0}}, // a query counts nothing
		{900 * ms, 3, Decision{Allowed: true, Remaining: 0, Reset: 300 * ms}},
		{900 * ms, 4, Decision{RetryAfter: Never, Remaining: 0, Reset: 300 * ms}}, // never conforms
		{950 * ms, 0, Decision{Allowed: true, Remaining: 0, Reset: 250 * ms}},
		{1000 * ms, 0, Decision{Allowed: true, Remaining: 1, Reset: 200 * ms}},
		{2 * time.Second, 1, Decision{Allowed: true, Remaining: 2, Reset: 100 * ms}},
	})
	// Burst 1: one at a time, exactly T apart.
	runSteps(t, newStore(t, Options{MaxKeys: 64}), "k", Limit{Interval: time.Second, Burst: 1}, []step{
		{0, 1, Decision{Allowed: true, Remaining: 0, Reset: time.Second}},
		{0, 1, Decision{RetryAfter: time.Second, Reset: time.Second}},
		{time.Second - 1, 1, Decision{RetryAfter: 1, Reset: 1}},
		{time.Second, 1, Decision{Allowed: true, Remaining: 0, Reset: time.Second}},
	})
}

// TestBurstThenReject checks burst exactly, burst+1 rejected, and RetryAfter exactly the
// time until the next conforming instant, across scales.
func TestBurstThenReject(t *testing.T) {
	for _, lim := range []Limit{{1, 1}, {1, 1000}, {1_333_334, 75}, {time.Second, 10}, {6 * time.Minute, 3}, {time.Hour, 1 << 10}, {1, 1 << 16}} {
		s := newStore(t, Options{MaxKeys: 64})
		for i := range lim.Burst {
			if d := s.AllowAt("k", lim, t0, 1); !d.Allowed || d.Remaining != lim.Burst-1-i {
				t.Fatalf("%+v: request %d of the burst: %+v", lim, i+1, d)
			}
		}
		d := s.AllowAt("k", lim, t0, 1)
		if d.Allowed || d.RetryAfter != lim.Interval {
			t.Fatalf("%+v: burst+1: %+v, want rejected with RetryAfter %v", lim, d, lim.Interval)
		}
		if d := s.AllowAt("k", lim, t0.Add(d.RetryAfter-1), 1); d.Allowed || d.RetryAfter != 1 {
			t.Fatalf("%+v: 1ns before RetryAfter: %+v", lim, d)
		}
		if d := s.AllowAt("k", lim, t0.Add(d.RetryAfter), 1); !d.Allowed {
			t.Fatalf("%+v: at RetryAfter: %+v", lim, d)
		}
	}
}

func TestInvalid(t *testing.T) {
	s := newStore(t, Options{MaxKeys: 64})
	for _, lim := range []Limit{{}, {Interval: time.Second}, {Burst: 1}, {Interval: -1, Burst: 1}, {Interval: time.Hour, Burst: 1 << 30}} {
		if lim.Validate() == nil {
			t.Errorf("%+v: Validate() = nil", lim)
		}
		if d := s.AllowAt("k", lim, t0, 1); d != reject {
			t.Errorf("%+v: AllowAt = %+v, want %+v", lim, d, reject)
		}
		if d, err := s.Allow(t.Context(), "k", lim, t0, 1); d != reject || !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: Allow = %+v, %v", lim, d, err)
		}
	}
	lim := Limit{Interval: time.Second, Burst: 2}
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Allow(t.Context(), "k", lim, t0, -1); d != reject || !errors.Is(err, ErrInvalidN) {
		t.Errorf("n=-1: %+v, %v", d, err)
	}
	if d, err := s.Allow(t.Context(), "k", lim, t0, 3); d.Allowed || d.RetryAfter != Never || d.Remaining != 2 || !errors.Is(err, ErrInvalidN) {
		t.Errorf("n=3 > burst: %+v, %v", d, err)
	}
	if d, err := s.Allow(t.Context(), "k", lim, t0, 2); !d.Allowed || err != nil {
		t.Errorf("n=2: %+v, %v", d, err)
	}
	if st := s.Stats(); st.Keys != 1 {
		t.Errorf("Keys = %d after one admitted key, want 1", st.Keys)
	}
}

// TestLimitShrinks: after a reload lowers the burst, a key over the new depth is
// rejected until it drains, and Remaining never goes negative.
func TestLimitShrinks(t *testing.T) {
	s := newStore(t, Options{MaxKeys: 64})
	big, small := Limit{Interval: time.Second, Burst: 10}, Limit{Interval: time.Second, Burst: 2}
	if d := s.AllowAt("k", big, t0, 10); !d.Allowed {
		t.Fatal(d)
	}
	d := s.AllowAt("k", small, t0, 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 9*time.Second || d.Reset != 10*time.Second {
		t.Errorf("after shrink: %+v", d)
	}
}

// admission is one admitted request of a key.
type admission struct {
	at int64 // ns
	n  int
}

// checkBound checks that every closed window [a.at, b.at] between admissions holds at
// most B + ⌊W/T⌋ units; windows ending on admissions are the worst case.
func checkBound(t *testing.T, what string, lim Limit, adm []admission) {
	t.Helper()
	for i := range adm {
		sum := 0
		for j := i; j < len(adm); j++ {
			sum += adm[j].n
			w := adm[j].at - adm[i].at
			if bound := lim.Burst + int(w/int64(lim.Interval)); sum > bound {
				t.Fatalf("%s: %d units admitted in [%d, %d] (W=%v), bound B+⌊W/T⌋ = %d (T=%v, B=%d)",
					what, sum, adm[i].at, adm[j].at, time.Duration(w), bound, lim.Interval, lim.Burst)
			}
		}
	}
}

// randomLimit and randomGap make arrival sequences that mix bursts, arrivals near the
// rate and long idle periods.
func randomLimit(r *rand.Rand) Limit {
	iv := time.Duration(1) << r.IntN(31) // 1ns .. ~1s
	iv += time.Duration(r.Int64N(int64(iv)))
	return Limit{Interval: iv, Burst: 1 + r.IntN(40)}
}

func randomGap(r *rand.Rand, lim Limit) time.Duration {
	switch p := r.Float64(); {
	case p < 0.3:
		return 0
	case p < 0.95:
		return time.Duration(r.Int64N(2*int64(lim.Interval) + 1))
	default:
		return time.Duration(r.Int64N(3*int64(lim.Burst)*int64(lim.Interval) + 1))
	}
}

func randomN(r *rand.Rand, lim Limit) int {
	if r.IntN(5) == 0 {
		return r.IntN(lim.Burst + 2) // 0 .. burst+1
	}
	return 1
}

// TestBoundRandomized drives one key with random arrivals and checks the window bound,
// that RetryAfter is exactly the next conforming instant, and that the bound is tight.
func TestBoundRandomized(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 0x1e7ee))
		lim := randomLimit(r)
		var tat, now int64 = -1 << 62, 0
		var adm []admission
		reachedTight := false
		for range 1500 {
			now += int64(randomGap(r, lim))
			n := randomN(r, lim)
			if n > lim.Burst {
				continue
			}
			next, d := lim.decide(tat, now, n)
			if d.Allowed {
				tat = next
				if n > 0 {
					adm = append(adm, admission{now, n})
				}
				continue
			}
			ra := int64(d.RetryAfter)
			if _, before := lim.decide(tat, now+ra-1, n); before.Allowed {
				t.Fatalf("seed %d: RetryAfter %v is late: conforming 1ns earlier", seed, d.RetryAfter)
			}
			if _, at := lim.decide(tat, now+ra, n); !at.Allowed {
				t.Fatalf("seed %d: not conforming at RetryAfter %v", seed, d.RetryAfter)
			}
			reachedTight = reachedTight || d.Remaining == 0
		}
		checkBound(t, fmt.Sprintf("seed %d", seed), lim, adm)
		if !reachedTight {
			t.Logf("seed %d: never saturated", seed)
		}
	}
}

// TestBoundIsReached: a greedy client gets exactly B + ⌊W/T⌋ in a window of length W.
func TestBoundIsReached(t *testing.T) {
	lim := Limit{Interval: 1_333_334, Burst: 75} // 750/s, burst 75
	s := newStore(t, Options{MaxKeys: 64})
	admitted := 0
	// 10x the rate for 10s, evenly spaced (one request every T/10).
	step := lim.Interval / 10
	end := 10 * time.Second
	for at := time.Duration(0); at <= end; at += step {
		if s.AllowAt("app", lim, t0.Add(at), 1).Allowed {
			admitted++
		}
	}
	last := end / step * step
	want := lim.Burst + int(last/lim.Interval)
	if admitted != want {
		t.Fatalf("admitted %d under 10x load, want B+⌊W/T⌋ = %d", admitted, want)
	}
	// Within 1% of the configured rate over the window, plus the burst.
	if rate := float64(admitted-lim.Burst) / end.Seconds(); rate < 750*0.99 || rate > 750*1.01 {
		t.Fatalf("admitted rate %.2f/s, want 750/s ±1%%", rate)
	}
}
