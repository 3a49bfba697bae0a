package admit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Held slots count against the limit until released, even past it.
func TestHoldCountsAgainstTheLimit(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 2}, clock.NewFake(time.Unix(1_800_000_000, 0)))
	l.Hold(3)
	if got := l.InFlight(); got != 3 {
		t.Fatalf("InFlight = %d, want 3", got)
	}
	var rej *Rejection
	if err := l.Acquire(context.Background()); !errors.As(err, &rej) {
		t.Fatalf("Acquire with 3 held of 2 = %v, want a rejection", err)
	}
	l.Release()
	l.Release()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("Acquire with 1 held of 2 = %v", err)
	}
	l.Release()
	l.Release()
	if got := l.InFlight(); got != 0 {
		t.Fatalf("InFlight = %d after every release, want 0", got)
	}
}

// A sealed limiter admits below its ceiling only (the slots held at the
// seal, and with slack an eighth of the concurrency, at least 1), refuses
// the others at once (ErrSealed), and never raises the ceiling when
// sealed again; Unseal lifts it.
func TestSealKeepsTheCountFromRising(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 4, MaxLen: 8, MaxWait: time.Hour}, clock.NewFake(time.Unix(1_800_000_000, 0)))
	ctx := context.Background()
	acquire := func(n int) {
		t.Helper()
		for range n {
			if err := l.Acquire(ctx); err != nil {
				t.Fatalf("Acquire = %v with %d held", err, l.InFlight())
			}
		}
	}
	release := func(n int) {
		for range n {
			l.Release()
		}
	}
	acquire(2)
	if got := l.Seal(true); got != 3 {
		t.Fatalf("Seal = %d, want the 2 held and 1 of slack", got)
	}
	acquire(1)
	if err := l.Acquire(ctx); err != ErrSealed {
		t.Fatalf("Acquire at the ceiling of 3 of 4 = %v, want ErrSealed, not a place in the queue", err)
	}
	if q := l.Queued(); q != 0 {
		t.Fatalf("%d queued at a sealed limiter, want none", q)
	}
	release(1)
	acquire(1) // into the slot freed below the ceiling
	release(2)
	if got := l.Seal(true); got != 2 {
		t.Fatalf("Seal with 1 held = %d, want 2", got)
	}
	acquire(1)
	if err := l.Acquire(ctx); err != ErrSealed {
		t.Fatalf("Acquire at the lowered ceiling = %v, want ErrSealed", err)
	}
	release(2)
	if got := l.Seal(true); got != 1 {
		t.Fatalf("Seal with none held = %d, want the slack, 1", got)
	}
	acquire(1)
	if got := l.Seal(true); got != 1 {
		t.Fatalf("Seal with 1 held = %d, want 1: a ceiling never rises", got)
	}
	l.Release()
	if got := l.Seal(false); got != 0 {
		t.Fatalf("Seal without slack, none held = %d, want 0", got)
	}
	if err := l.Acquire(ctx); err != ErrSealed {
		t.Fatalf("Acquire at a ceiling of 0 = %v, want ErrSealed", err)
	}
	l.Unseal()
	acquire(4)
	if got := l.InFlight(); got != 4 {
		t.Fatalf("InFlight = %d after Unseal, want the concurrency, 4", got)
	}
	release(4)
	// The ceiling stays within the concurrency, and the slack grows with it.
	big := NewLimiter(Limits{Concurrency: 64}, clock.NewFake(time.Unix(1_800_000_000, 0)))
	for range 60 {
		if err := big.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := big.Seal(true); got != 64 {
		t.Fatalf("Seal of 64 with 60 held = %d, want the concurrency, 64", got)
	}
	for range 50 {
		big.Release()
	}
	if got := big.Seal(true); got != 18 {
		t.Fatalf("Seal of 64 with 10 held = %d, want 10 and a slack of 8", got)
	}
}

// A waiter queued before the seal takes a freed slot; Unseal grants
// waiters the room it opens.
func TestSealPassesFreedSlotsToWaiters(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 2, MaxLen: 2, MaxWait: time.Hour}, clock.NewFake(time.Unix(1_800_000_000, 0)))
	ctx := context.Background()
	for range 2 {
		if err := l.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 2)
	for range 2 {
		go func() { got <- l.Acquire(ctx) }()
	}
	for l.Queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	if c := l.Seal(true); c != 2 {
		t.Fatalf("Seal = %d, want the concurrency, 2", c)
	}
	l.Release()
	if err := <-got; err != nil {
		t.Fatalf("the first waiter = %v, want the freed slot", err)
	}
	if q, n := l.Queued(), l.InFlight(); q != 1 || n != 2 {
		t.Fatalf("after one release: %d queued and %d in flight, want 1 and 2", q, n)
	}
	l.Release()
	if err := <-got; err != nil {
		t.Fatalf("the second waiter = %v, want the freed slot", err)
	}
	l.Release()
	l.Release()
	if c := l.Seal(true); c != 1 {
		t.Fatalf("Seal with none held = %d, want the slack, 1", c)
	}
	l.Unseal()
	for range 2 {
		if err := l.Acquire(ctx); err != nil {
			t.Fatalf("Acquire after Unseal = %v", err)
		}
	}
}
