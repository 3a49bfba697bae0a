package ratelimit

import (
	"testing"
	"time"
)

// TestBucketKeepsTheReserve: with keep = k, Take admits only while k more
// units would still conform, so those callers leave the last k of the
// burst to others; keep = 0 takes it to the end. Over any window the total
// stays within rate·window + burst.
func TestBucketKeepsTheReserve(t *testing.T) {
	epoch := time.Unix(1_000_000, 0)
	lim := Limit{Interval: 10 * time.Millisecond, Burst: 10} // 100/s
	b, err := NewBucket(lim, epoch)
	if err != nil {
		t.Fatal(err)
	}
	now := epoch
	admitted := 0
	for b.Take(now, 1, 5).Allowed {
		admitted++
	}
	if admitted != 5 {
		t.Fatalf("keep 5 of a burst of 10 admitted %d at once, want 5", admitted)
	}
	for b.Take(now, 1, 0).Allowed {
		admitted++
	}
	if admitted != 10 {
		t.Fatalf("admitted %d at once in all, want the burst of 10", admitted)
	}
	d := b.Take(now, 1, 5)
	if d.Allowed || d.RetryAfter != 60*time.Millisecond {
		t.Fatalf("empty bucket, keep 5: %+v, want a refusal retrying after 6 intervals", d)
	}
	// One second of two callers, one keeping 5, one keeping 0, each trying
	// every millisecond: the total is exactly rate·t + burst.
	for i := 1; i <= 1000; i++ {
		now = epoch.Add(time.Duration(i) * time.Millisecond)
		for _, keep := range []int{5, 0} {
			if b.Take(now, 1, keep).Allowed {
				admitted++
			}
		}
	}
	if admitted != 10+100 {
		t.Fatalf("admitted %d over 1s at 100/s with burst 10, want 110", admitted)
	}
	if d := b.Take(now, 6, 5); d.Allowed || d.RetryAfter != Never {
		t.Fatalf("n+keep over the burst: %+v, want a refusal that never conforms", d)
	}
}
