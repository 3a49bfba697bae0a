package admit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// TestBeginTakesQueuesOrRefuses: Begin never waits. It takes a free
// slot, queues when none is free and the queue has room, and refuses when
// it has none; the queued one's Wait gets the slot released to it.
func TestBeginTakesQueuesOrRefuses(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := NewLimiter(Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Minute}, clk)
	first, err := l.Begin(Ticket{})
	if err != nil || first.Queued() {
		t.Fatalf("free slot: queued %v, err %v", first.Queued(), err)
	}
	if d, err := first.Wait(context.Background()); d != 0 || err != nil {
		t.Fatalf("Wait of a slot taken: %v, %v", d, err)
	}
	second, err := l.Begin(Ticket{})
	if err != nil || !second.Queued() || l.Queued() != 1 {
		t.Fatalf("no free slot: queued %v (%d), err %v", second.Queued(), l.Queued(), err)
	}
	if _, err := l.Begin(Ticket{}); !errors.Is(err, errQueueFull) {
		t.Fatalf("full queue: %v, want queue-full", err)
	}
	clk.Advance(time.Second)
	l.Release() // the first's slot passes to the second
	d, err := second.Wait(context.Background())
	if err != nil || d != time.Second {
		t.Fatalf("queued Wait: %v, %v; want 1s waited", d, err)
	}
	if l.InFlight() != 1 || l.Queued() != 0 {
		t.Fatalf("in flight %d, queued %d; want 1, 0", l.InFlight(), l.Queued())
	}
	l.Release()
}

// TestPendingWaitTimesOut: a queued Pending's wait ends at the queue's
// bound, as AcquireFor's does.
func TestPendingWaitTimesOut(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := NewLimiter(Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second}, clk)
	mustBegin(t, l, Ticket{})
	p := mustBegin(t, l, Ticket{})
	done := make(chan error, 1)
	go func() { _, err := p.Wait(context.Background()); done <- err }()
	<-clk.TimerCreated()
	clk.Advance(time.Second)
	if err := <-done; !errors.Is(err, errQueueTimeout) {
		t.Fatalf("Wait: %v, want queue-timeout", err)
	}
	if l.InFlight() != 1 || l.Queued() != 0 {
		t.Fatalf("in flight %d, queued %d; want 1, 0", l.InFlight(), l.Queued())
	}
}

// TestPendingCancel: Cancel gives back a slot taken, and leaves the
// queue; a slot granted to a queued one meanwhile passes on.
func TestPendingCancel(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 1, MaxLen: 2, MaxWait: time.Minute}, clock.NewFake(epoch))
	a := Ticket{Client: "a"}
	taken := mustBegin(t, l, a)
	taken.Cancel(a)
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d after a taken slot's Cancel", l.InFlight())
	}

	mustBegin(t, l, Ticket{}) // holds the slot
	left := mustBegin(t, l, a)
	left.Cancel(a)
	if l.Queued() != 0 || l.InFlight() != 1 {
		t.Fatalf("queued %d, in flight %d after a queued Cancel; want 0, 1", l.Queued(), l.InFlight())
	}

	granted := mustBegin(t, l, a)
	next := mustBegin(t, l, Ticket{})
	l.Release() // to granted, which no one waits for
	granted.Cancel(a)
	if d, err := next.Wait(context.Background()); err != nil {
		t.Fatalf("the next waiter: %v, %v; want the slot passed on", d, err)
	}
	if l.InFlight() != 1 || l.Queued() != 0 {
		t.Fatalf("in flight %d, queued %d; want 1, 0", l.InFlight(), l.Queued())
	}
}

// TestBeginSealed: a sealed limiter refuses what would queue.
func TestBeginSealed(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Minute}, clock.NewFake(epoch))
	mustBegin(t, l, Ticket{})
	l.Seal(false)
	if _, err := l.Begin(Ticket{}); err != ErrSealed {
		t.Fatalf("sealed: %v", err)
	}
}

func mustBegin(t *testing.T, l *Limiter, tk Ticket) Pending {
	t.Helper()
	p, err := l.Begin(tk)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
