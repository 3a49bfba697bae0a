package admit

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// queuedFor starts AcquireFor(t) on l in a goroutine and returns once it
// waits (the queue has grown to n); done receives its result.
func queuedFor(t *testing.T, l *Limiter, ctx context.Context, tk Ticket, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.AcquireFor(ctx, tk) }()
	leaktest.WaitFor(t, leaktest.Wait, "the waiters to queue", func() bool { return l.Queued() >= n })
	return done
}

func TestPatientWaitsInsteadOfRefusing(t *testing.T) {
	l := NewPatient(2)
	a, b := Ticket{Client: "a"}, Ticket{Client: "b"}
	ctx := context.Background()
	for range 2 {
		if err := l.AcquireFor(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// A limiter of NewLimiter would refuse both (no queue); these wait.
	a3 := queuedFor(t, l, ctx, a, 1)
	b1 := queuedFor(t, l, ctx, b, 2)
	// a holds 2 > its share of 1 while b waits: the slot goes to b, though
	// a's waiter came first.
	l.ReleaseFor(a)
	if err := <-b1; err != nil {
		t.Fatalf("b: %v", err)
	}
	select {
	case err := <-a3:
		t.Fatalf("a's third request was served (%v) while b, under its share, waited", err)
	default:
	}
	// Nobody under its share waits now: a's waiter gets the next slot.
	l.ReleaseFor(b)
	if err := <-a3; err != nil {
		t.Fatalf("a: %v", err)
	}
	l.ReleaseFor(a)
	l.ReleaseFor(a)
	if l.InFlight() != 0 || l.Queued() != 0 || len(l.s.clients) != 0 {
		t.Errorf("left: %d in flight, %d queued, %d clients", l.InFlight(), l.Queued(), len(l.s.clients))
	}
}

func TestPatientCancelLeavesNothing(t *testing.T) {
	l := NewPatient(1)
	ctx := context.Background()
	if err := l.AcquireFor(ctx, Ticket{Client: "a"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := queuedFor(t, l, wctx, Ticket{Client: "b"}, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if l.Queued() != 0 || len(l.s.clients) != 1 {
		t.Errorf("after cancel: %d queued, %d clients, want 0 and 1", l.Queued(), len(l.s.clients))
	}
	l.ReleaseFor(Ticket{Client: "a"})
	if l.InFlight() != 0 || len(l.s.clients) != 0 {
		t.Errorf("after release: %d in flight, %d clients", l.InFlight(), len(l.s.clients))
	}
}

// TestPatientShareByOrderOfService drives the patient scheduler directly:
// closed-loop callers (each, once granted, asks again at once, as a fan-out
// loop calling admission's Group.Go does) for a heavy client with many
// callers and a light one with few, tasks finishing in a seeded random
// order. It checks the rule structurally at every release: a waiter of a
// client under its fair share is granted by that very release, so the
// light client never waits behind the heavy one's excess; no slot is idle
// while anyone waits; and two clients with endless demand split the slots.
func TestPatientShareByOrderOfService(t *testing.T) {
	const slots = 8
	type caller struct {
		key  string
		w    *waiter
		runs int
	}
	var woken []*waiter
	s := newSched(Limits{Concurrency: slots}, clock.NewFake(epoch), func(w *waiter) { woken = append(woken, w) })
	s.patient = true
	var callers []*caller
	for range 6 {
		callers = append(callers, &caller{key: "heavy"})
	}
	callers = append(callers, &caller{key: "light"}, &caller{key: "light"})
	byWaiter := map[*waiter]*caller{}
	var running []*caller // one entry per slot held
	var ask func(c *caller)
	ask = func(c *caller) {
		cl := s.client(c.key)
		if s.tryTake(cl) {
			running = append(running, c)
			c.runs++
			ask(c) // granted at once: the loop goes on to its next item
			return
		}
		c.w = &waiter{rank: Default.rank(), cl: cl}
		if rej, _ := s.enqueue(epoch, c.w); rej != nil {
			t.Fatalf("patient enqueue refused: %v", rej)
		}
		byWaiter[c.w] = c
	}
	for _, c := range callers {
		ask(c)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20000 {
		if s.inflight != slots || s.queued != len(callers) {
			t.Fatalf("step %d: %d in flight, %d queued; want %d and %d", step, s.inflight, s.queued, slots, len(callers))
		}
		// Which clients have a waiter and are under their share now?
		share := s.share()
		under := map[string]bool{}
		for w := s.lists[Default.rank()].head; w != nil; w = w.next {
			if w.cl.held < share {
				under[w.cl.key] = true
			}
		}
		i := rng.IntN(len(running))
		done := running[i]
		running = append(running[:i], running[i+1:]...)
		s.release(s.clients[done.key])
		if len(woken) != 1 {
			t.Fatalf("step %d: release woke %d waiters, want 1", step, len(woken))
		}
		w := woken[0]
		woken = woken[:0]
		c := byWaiter[w]
		delete(byWaiter, w)
		if len(under) > 0 && !under[c.key] {
			t.Fatalf("step %d: slot granted to %s (holding %d, share %d) while %v waited under their share",
				step, c.key, w.cl.held-1, share, under)
		}
		running = append(running, c)
		c.runs++
		ask(c)
	}
	var heavy, light int
	for _, c := range callers {
		if c.key == "heavy" {
			heavy += c.runs
		} else {
			light += c.runs
		}
	}
	// Both clients have unbounded demand, so each gets half the slots.
	if light < heavy*4/5 {
		t.Errorf("light client ran %d tasks, heavy %d: want about half each", light, heavy)
	}
}
