package bandwidth

import (
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

func handoverLimiter(t *testing.T, clk clock.Clock) *Limiter {
	t.Helper()
	l, err := New(Options{Name: "a", Rate: 1000, Burst: 1000, Chunk: 100, MaxDelay: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wait is how long n bytes would wait at now (reserving them).
func wait(t *testing.T, l *Limiter, now time.Time, n int) time.Duration {
	t.Helper()
	r, err := l.ReserveAt(now, n)
	if err != nil {
		t.Fatal(err)
	}
	return r.Delay()
}

// A bucket taken over continues where the old one was; an empty start
// and a charge make the next bytes wait their time.
func TestHandoverContinuesTheBucket(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	now := clk.Now()
	old := handoverLimiter(t, clk)
	for range 10 { // the whole burst, 1000 bytes
		wait(t, old, now, 100)
	}
	next := handoverLimiter(t, clock.NewFake(time.Unix(1_900_000_000, 0))) // another clock: only the relation counts
	then := time.Unix(1_900_000_000, 0)
	next.Resume(then, old.Ahead(now))
	if d := wait(t, next, then, 100); d != 100*time.Millisecond {
		t.Errorf("100 bytes after the burst was spent wait %v in the new bucket, want 100ms", d)
	}

	empty := handoverLimiter(t, clk)
	empty.StartEmpty(now)
	if d := wait(t, empty, now, 100); d != 100*time.Millisecond {
		t.Errorf("100 bytes right after StartEmpty wait %v, want 100ms", d)
	}

	charged := handoverLimiter(t, clk)
	charged.Charge(now, 1500) // past the burst
	if d := wait(t, charged, now, 100); d != 600*time.Millisecond {
		t.Errorf("100 bytes after a charge of 1500 wait %v, want 600ms", d)
	}
	var none *Limiter
	none.Resume(now, time.Second)
	none.Charge(now, 1)
	none.StartEmpty(now)
	if none.Ahead(now) != 0 {
		t.Error("a nil limiter has a state")
	}
}
