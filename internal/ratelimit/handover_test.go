package ratelimit

import (
	"testing"
	"time"
)

// A store that imports another's export decides as the exporter would:
// what one spent, the other does not hand out again.
func TestExportImportCarriesTheBuckets(t *testing.T) {
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 5}
	t0 := time.Now()
	old := newStore(t, Options{MaxKeys: 8, Shards: 1})
	for range 5 {
		if !old.AllowAt("spent", lim, t0, 1).Allowed {
			t.Fatal("burst refused")
		}
	}
	old.AllowAt("half", lim, t0, 2)
	keys, _ := old.Export(t0)
	if len(keys) != 2 {
		t.Fatalf("exported %d keys, want 2: %v", len(keys), keys)
	}
	next := newStore(t, Options{MaxKeys: 8, Shards: 1})
	t1 := t0.Add(time.Hour) // another process's clock: only the relation counts
	next.Import(t1, keys, 0)
	if next.AllowAt("spent", lim, t1, 1).Allowed {
		t.Error("a spent bucket was full again after the import")
	}
	if d := next.AllowAt("spent", lim, t1.Add(lim.Interval), 1); !d.Allowed {
		t.Errorf("one interval later: %+v, want admitted", d)
	}
	if d := next.AllowAt("half", lim, t1, 0); d.Remaining != 3 {
		t.Errorf("half-spent bucket has %d left, want 3", d.Remaining)
	}
	if d := next.AllowAt("fresh", lim, t1, 0); d.Remaining != 5 {
		t.Errorf("a key not exported has %d left, want a full 5", d.Remaining)
	}
}

// A key that finds the importing store full does not start full later.
func TestImportIntoAFullStoreRaisesTheFloor(t *testing.T) {
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 5}
	t0 := time.Now()
	next := newStore(t, Options{MaxKeys: 1, Shards: 1})
	next.Import(t0, []Entry{{Key: "a", Ahead: time.Second}, {Key: "b", Ahead: time.Second}}, 0)
	if d := next.AllowAt("b", lim, t0.Add(lim.Interval), 1); d.Allowed {
		t.Errorf("b, which did not fit, was admitted at once: %+v", d)
	}
	if d := next.AllowAt("b", lim, t0.Add(time.Second+lim.Interval), 1); !d.Allowed {
		t.Errorf("b once its own bucket would have refilled: %+v, want admitted", d)
	}
}

// StartEmpty: every key starts with its burst spent, and refills at the
// limit's rate.
func TestStartEmpty(t *testing.T) {
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 5}
	t0 := time.Now()
	s := newStore(t, Options{MaxKeys: 8, Shards: 1})
	s.StartEmpty(t0, time.Duration(lim.Burst)*lim.Interval)
	if d := s.AllowAt("any", lim, t0, 1); d.Allowed {
		t.Fatalf("admitted at once after StartEmpty: %+v", d)
	}
	if d := s.AllowAt("any", lim, t0.Add(lim.Interval), 1); !d.Allowed {
		t.Fatalf("one interval later: %+v, want admitted", d)
	}
	if d := s.AllowAt("other", lim, t0.Add(lim.Interval), 2); d.Allowed {
		t.Fatalf("two at once one interval later: %+v, want refused", d)
	}
}

// What another process admitted is charged: the bucket refuses until it
// has refilled, even past its burst; Observe tells each admission.
func TestChargeAndObserve(t *testing.T) {
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 2}
	t0 := time.Now()
	s := newStore(t, Options{MaxKeys: 8, Shards: 1})
	var seen []string
	s.Observe(func(key string, n int) { seen = append(seen, key) })
	s.AllowAt("a", lim, t0, 1)
	s.AllowAt("a", lim, t0, 0) // asks, counts nothing
	s.Observe(nil)
	s.AllowAt("b", lim, t0, 1)
	if len(seen) != 1 || seen[0] != "a" {
		t.Errorf("observed %v, want [a]", seen)
	}
	s.Charge("a", lim, t0, 3) // a: 1 + 3 = 4 units, twice its burst
	if d := s.AllowAt("a", lim, t0.Add(2*lim.Interval), 1); d.Allowed {
		t.Errorf("admitted two intervals after a charge of 4 over a burst of 2: %+v", d)
	}
	if d := s.AllowAt("a", lim, t0.Add(3*lim.Interval), 1); !d.Allowed {
		t.Errorf("three intervals later: %+v, want admitted", d)
	}
}

// A Bucket is taken over as a store's key is: what the old one spent
// (Ahead, then Charge) is not handed out again, a bucket that cannot be
// taken over starts empty, and Taken counts what Take admitted.
func TestBucketHandover(t *testing.T) {
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 4}
	t0 := time.Now()
	old, err := NewBucket(lim, t0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !old.Take(t0, 1, 0).Allowed {
			t.Fatal("burst refused")
		}
	}
	if got := old.Taken(); got != 3 {
		t.Fatalf("Taken = %d, want 3", got)
	}
	ahead := old.Ahead(t0)
	if ahead != 3*lim.Interval {
		t.Fatalf("Ahead = %v, want 3 intervals", ahead)
	}
	t1 := t0.Add(time.Hour) // another process's clock
	next, _ := NewBucket(lim, t1)
	next.Resume(t1, ahead)
	if d := next.Take(t1, 0, 0); d.Remaining != 1 {
		t.Errorf("after Resume %d left, want the old one's 1", d.Remaining)
	}
	next.Charge(t1, 1) // the old one admitted one more
	if next.Take(t1, 1, 0).Allowed {
		t.Error("admitted past what the two spent together")
	}
	if got := next.Taken(); got != 0 {
		t.Errorf("Taken = %d after refusals and charges, want 0", got)
	}
	empty, _ := NewBucket(lim, t1)
	empty.StartEmpty(t1)
	if empty.Take(t1, 1, 0).Allowed {
		t.Error("a bucket started empty admitted at once")
	}
	if !empty.Take(t1.Add(lim.Interval), 1, 0).Allowed {
		t.Error("a bucket started empty did not refill at its rate")
	}
}
