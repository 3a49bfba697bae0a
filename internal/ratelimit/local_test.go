package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestOptions(t *testing.T) {
	for _, o := range []Options{{}, {MaxKeys: -1}, {MaxKeys: 64, Shards: 3}, {MaxKeys: 4, Shards: 8}, {MaxKeys: 64, ScanInterval: -1}} {
		if _, err := NewLocalStore(o); err == nil {
			t.Errorf("NewLocalStore(%+v): no error", o)
		}
	}
	for _, tt := range []struct {
		o                Options
		shards, capacity int
	}{
		{Options{MaxKeys: 1}, 1, 1},
		{Options{MaxKeys: 5}, 4, 1},
		{Options{MaxKeys: 1000}, 64, 15},
		{Options{MaxKeys: 1 << 20}, 64, 1 << 14},
		{Options{MaxKeys: 8, Shards: 2}, 2, 4},
	} {
		s := newStore(t, tt.o)
		if len(s.shards) != tt.shards || s.shards[0].capacity != tt.capacity || s.Stats().MaxKeys > tt.o.MaxKeys {
			t.Errorf("%+v: %d shards of %d, want %d of %d", tt.o, len(s.shards), s.shards[0].capacity, tt.shards, tt.capacity)
		}
	}
}

// fill makes n keys k0..k(n-1) spend their whole burst at time at.
func fill(t *testing.T, s *LocalStore, lim Limit, n int, at time.Time) {
	t.Helper()
	for i := range n {
		if d := s.AllowAt(fmt.Sprint("k", i), lim, at, lim.Burst); !d.Allowed {
			t.Fatalf("fill k%d: %+v", i, d)
		}
	}
}

// TestFullTableKeepsActiveKeys: a table full of keys whose buckets are not full evicts
// none of them for new keys; new keys share the overflow bucket, which still limits them.
func TestFullTableKeepsActiveKeys(t *testing.T) {
	lim := Limit{Interval: time.Second, Burst: 2}
	s := newStore(t, Options{MaxKeys: 4, Shards: 1})
	fill(t, s, lim, 4, t0)
	at := t0.Add(500 * time.Millisecond)
	admitted := 0
	for i := range 1000 {
		if s.AllowAt(fmt.Sprint("new", i), lim, at, 1).Allowed {
			admitted++
		}
	}
	if admitted != lim.Burst {
		t.Errorf("1000 new keys in a full table: %d admitted, want the overflow bucket's burst %d", admitted, lim.Burst)
	}
	st := s.Stats()
	if st.Keys != 4 || st.Evicted != 0 || st.Overflowed != 1000 {
		t.Errorf("stats %+v, want 4 keys, 0 evicted, 1000 overflowed", st)
	}
	for i := range 4 {
		d := s.AllowAt(fmt.Sprint("k", i), lim, at, 1)
		if d.Allowed || d.RetryAfter != 500*time.Millisecond {
			t.Errorf("k%d after the flood: %+v, want rejected with its own RetryAfter 500ms", i, d)
		}
	}
}

// TestNoBurstFromForcedEviction is the nginx limit_req failure (PR #542): a client that
// spent its burst floods the table with fresh keys to get itself evicted, then comes
// back. Its decisions must be those of a table nobody flooded.
func TestNoBurstFromForcedEviction(t *testing.T) {
	lim := Limit{Interval: 100 * time.Millisecond, Burst: 5}
	flooded := newStore(t, Options{MaxKeys: 8, Shards: 1, ScanInterval: time.Nanosecond})
	control := newStore(t, Options{MaxKeys: 8, Shards: 1})
	r := rand.New(rand.NewPCG(7, 7))
	now := t0
	for i := range 3000 {
		now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
		for j := range 20 { // the flood: fresh keys, and some that repeat
			flooded.AllowAt(fmt.Sprint("flood", i, "-", j%(1+r.IntN(20))), lim, now, 1)
		}
		got, want := flooded.AllowAt("client", lim, now, 1), control.AllowAt("client", lim, now, 1)
		if got.Allowed && !want.Allowed {
			t.Fatalf("step %d: the flooded table admitted the client (%+v) where the control rejected it (%+v)", i, got, want)
		}
	}
	if st := flooded.Stats(); st.Evicted == 0 || st.Overflowed == 0 {
		t.Errorf("the flood neither evicted nor overflowed: %+v", st)
	}
}

// TestIdleKeysMakeRoom: once keys are idle (TAT ≤ now) a new key takes a slot.
func TestIdleKeysMakeRoom(t *testing.T) {
	lim := Limit{Interval: time.Second, Burst: 2}
	s := newStore(t, Options{MaxKeys: 4, Shards: 1})
	fill(t, s, lim, 4, t0)
	if d := s.AllowAt("new", lim, t0.Add(2*time.Second-1), 1); !d.Allowed || s.Stats().Overflowed != 1 || s.Stats().Evicted != 0 {
		t.Fatalf("1ns before the keys are idle: %+v, %+v", d, s.Stats())
	}
	// The overflow bucket's TAT is now t0+3s-1: a key inserted before then starts from it.
	at := t0.Add(3 * time.Second)
	d := s.AllowAt("new2", lim, at, 2)
	if st := s.Stats(); !d.Allowed || st.Evicted != 4 || st.Keys != 1 {
		t.Fatalf("after the keys went idle: %+v, stats %+v", d, st)
	}
}

// TestOverflowToOwnEntry: a key admitted from the overflow bucket that later gets its
// own entry starts from the overflow bucket's state, not from a full bucket.
func TestOverflowToOwnEntry(t *testing.T) {
	lim := Limit{Interval: time.Second, Burst: 2}
	s := newStore(t, Options{MaxKeys: 2, Shards: 1})
	fill(t, s, Limit{Interval: time.Second, Burst: 1}, 2, t0) // idle at t0+1s
	at := t0.Add(500 * time.Millisecond)
	for i := range 2 {
		if d := s.AllowAt("x", lim, at, 1); !d.Allowed {
			t.Fatalf("x from overflow, request %d: %+v", i, d)
		}
	}
	if got := s.Sweep(t0.Add(time.Second)); got != 2 {
		t.Fatalf("Sweep removed %d, want 2", got)
	}
	d := s.AllowAt("x", lim, t0.Add(time.Second), 1)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("x with its own entry: %+v, want rejected until the overflow state allows (500ms)", d)
	}
	if st := s.Stats(); st.Keys != 0 {
		t.Errorf("a rejected new key took a slot: %+v", st)
	}
}

func TestSweep(t *testing.T) {
	lim := Limit{Interval: time.Second, Burst: 3}
	s := newStore(t, Options{MaxKeys: 1024})
	for i := range 100 {
		s.AllowAt(fmt.Sprint("k", i), lim, t0, 1+i%3) // TAT t0+1s, +2s, +3s
	}
	for _, tt := range []struct {
		at      time.Duration
		removed int
		left    int
	}{{time.Second - 1, 0, 100}, {time.Second, 34, 66}, {2 * time.Second, 33, 33}, {time.Hour, 33, 0}} {
		if got := s.Sweep(t0.Add(tt.at)); got != tt.removed || s.Stats().Keys != tt.left {
			t.Errorf("Sweep(t0+%v) = %d leaving %d, want %d leaving %d", tt.at, got, s.Stats().Keys, tt.removed, tt.left)
		}
	}
	if st := s.Stats(); st.Evicted != 100 {
		t.Errorf("Evicted = %d, want 100", st.Evicted)
	}
}

// TestTableBoundRandomized: under random traffic from more keys than the table holds,
// with sweeps, scans and overflow, every key stays within B + ⌊W/T⌋ on every window.
func TestTableBoundRandomized(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 42))
		lim := Limit{Interval: time.Duration(1+r.IntN(50)) * time.Millisecond, Burst: 1 + r.IntN(6)}
		s := newStore(t, Options{MaxKeys: 8, Shards: 1 << r.IntN(3), ScanInterval: time.Duration(r.IntN(20)) * time.Millisecond})
		adm := map[string][]admission{}
		var now int64
		for range 6000 {
			now += int64(randomGap(r, lim) / 4)
			key := fmt.Sprint("c", r.IntN(24))
			if r.IntN(200) == 0 {
				s.Sweep(t0.Add(time.Duration(now)))
			}
			n := randomN(r, lim)
			if d := s.AllowAt(key, lim, t0.Add(time.Duration(now)), n); d.Allowed && n > 0 {
				adm[key] = append(adm[key], admission{now, n})
			}
		}
		for key, a := range adm {
			checkBound(t, fmt.Sprintf("seed %d key %s", seed, key), lim, a)
		}
		if st := s.Stats(); st.Keys > 8 {
			t.Fatalf("seed %d: %d keys held, MaxKeys 8", seed, st.Keys)
		}
	}
}

// TestConcurrent: many goroutines at one instant admit exactly the burst per key, and
// at most one burst from the overflow bucket.
func TestConcurrent(t *testing.T) {
	lim := Limit{Interval: time.Second, Burst: 10}
	s := newStore(t, Options{MaxKeys: 16, Shards: 4})
	var perKey [64]atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := (i + g) % 64
				if s.AllowAt(fmt.Sprint("k", k), lim, t0, 1).Allowed {
					perKey[k].Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			s.Sweep(t0)
			s.Stats()
		}
	})
	wg.Wait()
	var total int64
	for k := range perKey {
		n := perKey[k].Load()
		if n > int64(lim.Burst) {
			t.Errorf("k%d admitted %d, burst %d", k, n, lim.Burst)
		}
		total += n
	}
	held := int64(s.Stats().Keys)
	if held > 16 || total > held*int64(lim.Burst)+int64(lim.Burst) {
		t.Errorf("%d keys held, %d admitted in all: more than one burst each plus one overflow burst", held, total)
	}
}
