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
