package admit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// waitFor starts an AcquireFor that must queue, and returns once it is queued.
func (h *harness) waitFor(t Ticket) *pendingAcquire {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	w := &pendingAcquire{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- h.l.AcquireFor(ctx, t) }()
	<-h.clk.TimerCreated() // only a queued Acquire makes a timer
	return w
}

// acquireFor runs an AcquireFor that must not queue.
func (h *harness) acquireFor(t Ticket) error {
	h.t.Helper()
	before := h.clk.Pending()
	err := h.l.AcquireFor(context.Background(), t)
	if h.clk.Pending() != before {
		h.t.Fatalf("AcquireFor(%+v) waited on a timer; the test expected it not to queue", t)
	}
	return err
}

// served releases one slot and checks that it went to want, leaving the
// others queued.
func (h *harness) served(want *pendingAcquire, name string, others ...*pendingAcquire) {
	h.t.Helper()
	h.l.Release()
	if err := want.result(); err != nil {
		h.t.Fatalf("%s: err = %v, want a slot", name, err)
	}
	for _, o := range others {
		if !o.running() {
			h.t.Fatalf("a waiter was served or dropped before %s", name)
		}
	}
}

func TestClassOrder(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 10, MaxWait: time.Second})
	h.mustAcquire(1)
	s1 := h.waitFor(Ticket{Class: Sheddable})
	d1 := h.waitFor(Ticket{})
	c1 := h.waitFor(Ticket{Class: Critical})
	d2 := h.waitFor(Ticket{Class: Default})
	s2 := h.waitFor(Ticket{Class: Sheddable})
	c2 := h.waitFor(Ticket{Class: Critical})
	h.check(1, 6)
	// Critical first, then Default, then Sheddable; FIFO within a class.
	h.served(c1, "critical 1", c2, d1, d2, s1, s2)
	h.served(c2, "critical 2", d1, d2, s1, s2)
	h.served(d1, "default 1", d2, s1, s2)
	h.served(d2, "default 2", s1, s2)
	h.served(s1, "sheddable 1", s2)
	h.served(s2, "sheddable 2")
	h.check(1, 0)
	h.l.Release()
	h.check(0, 0)
}

func TestFullQueueDisplacesLowerClass(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 3, MaxWait: time.Second})
	h.mustAcquire(1)
	d := h.waitFor(Ticket{})
	s1 := h.waitFor(Ticket{Class: Sheddable})
	s2 := h.waitFor(Ticket{Class: Sheddable})

	// A full queue refuses an arrival of the lowest class present...
	wantReject(t, h.acquireFor(Ticket{Class: Sheddable}), QueueFull)
	// ...and a higher class displaces the waiter served last: the newest sheddable.
	c := h.waitFor(Ticket{Class: Critical})
	wantReject(t, s2.result(), Shed)
	h.check(1, 3)
	d2 := h.waitFor(Ticket{}) // displaces s1, the last sheddable
	wantReject(t, s1.result(), Shed)
	// Nothing below Default is left: a Default arrival now finds the queue full.
	wantReject(t, h.acquireFor(Ticket{}), QueueFull)
	h.served(c, "critical", d, d2)
	h.served(d, "default 1", d2)
	h.served(d2, "default 2")
	h.l.Release()
	h.check(0, 0)
}

// TestOverloadStep walks the overload detector through entry, shedding,
// LIFO, dropping of old waiters, the short wait and exit, on the fake clock.
func TestOverloadStep(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 10, MaxWait: time.Second})
	ms := time.Millisecond
	h.mustAcquire(1)
	a := h.waitFor(Ticket{}) // t=0
	h.clk.Advance(6 * ms)
	b := h.waitFor(Ticket{}) // t=6: the oldest (a) is 6ms ≥ 5ms target: the stretch starts
	h.clk.Advance(94 * ms)
	c := h.waitFor(Ticket{}) // t=100: above the target for 94ms only
	if h.l.Overloaded() {
		t.Fatal("overloaded before a whole interval above the target")
	}
	h.clk.Advance(6 * ms)
	d := h.waitFor(Ticket{}) // t=106: 100ms above the target: overloaded
	if !h.l.Overloaded() {
		t.Fatal("not overloaded after a whole interval above the target")
	}
	// Waiters older than the short wait (2×5ms) are dropped at once.
	wantReject(t, a.result(), QueueTimeout)
	wantReject(t, b.result(), QueueTimeout)
	h.check(1, 2)

	// Sheddable arrivals are refused at once; Critical and Default still queue.
	wantReject(t, h.acquireFor(Ticket{Class: Sheddable}), Shed)
	h.clk.Advance(ms)
	e := h.waitFor(Ticket{}) // t=107
	// LIFO within the class: e is served before d and c.
	h.served(e, "freshest", c, d)
	if !h.l.Overloaded() {
		t.Fatal("overload ended while the oldest waiter is above the target")
	}
	// d queued under overload: it gets the short wait, 10ms.
	h.clk.Advance(9*ms - time.Nanosecond) // t=116-1ns
	if !d.running() {
		t.Fatal("waiter gave up before the short wait")
	}
	h.clk.Advance(time.Nanosecond)
	wantReject(t, d.result(), QueueTimeout)
	// c queued before the overload (1s timer); the next arrival drops it, as
	// it has waited more than the short wait, and that drains the queue:
	// the overload is over and the arrival gets the full max wait.
	f := h.waitFor(Ticket{Class: Sheddable})
	wantReject(t, c.result(), QueueTimeout)
	if h.l.Overloaded() {
		t.Fatal("still overloaded after the queue drained")
	}
	h.clk.Advance(500 * ms)
	h.served(f, "sheddable after the overload")
	h.l.Release()
	h.check(0, 0)
}

func TestOverloadEndsWhenDelayFallsBelowTarget(t *testing.T) {
	lim := Limits{Concurrency: 2, MaxLen: 10, MaxWait: time.Second, Target: 2 * time.Millisecond, Interval: 20 * time.Millisecond}
	h := newHarness(t, lim)
	ms := time.Millisecond
	h.mustAcquire(2)
	old := h.waitFor(Ticket{})
	h.clk.Advance(3 * ms)
	mid := h.waitFor(Ticket{}) // old is above the 2ms target from here
	h.clk.Advance(19 * ms)
	young1 := h.waitFor(Ticket{}) // t=22
	h.clk.Advance(ms)
	young2 := h.waitFor(Ticket{}) // t=23: 20ms above: overloaded; old and mid are ≥ 4ms (2×target): dropped
	if !h.l.Overloaded() {
		t.Fatal("not overloaded")
	}
	wantReject(t, old.result(), QueueTimeout)
	wantReject(t, mid.result(), QueueTimeout)
	h.clk.Advance(ms / 2)
	fresh := h.waitFor(Ticket{}) // the oldest, young1, is 1.5ms old: below target, but for less than an interval
	if !h.l.Overloaded() {
		t.Fatal("overload ended as soon as the drop left a young queue: it must last until the delay stays below the target for an interval")
	}
	h.served(fresh, "fresh (LIFO: newest first)", young1, young2)
	h.served(young2, "young2", young1)
	if !h.l.Overloaded() {
		t.Fatal("overload ended with a waiter left, below the target for less than an interval")
	}
	h.served(young1, "young1")
	if h.l.Overloaded() {
		t.Fatal("still overloaded after the queue emptied")
	}
	h.l.Release()
	h.l.Release()
	h.check(0, 0)
}

func TestClientShareRefusesOnlyWhenFull(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 4, MaxLen: 8, MaxWait: time.Second})
	abuser, nice := Ticket{Client: "abuser"}, Ticket{Client: "nice"}
	for range 4 { // alone, a client may take every free slot
		if err := h.acquireFor(abuser); err != nil {
			t.Fatalf("free slot refused: %v", err)
		}
	}
	// Full: a new client is within its share (4/2 = 2) and queues; the
	// abuser, holding 4, is refused at once.
	n := h.waitFor(nice)
	wantReject(t, h.acquireFor(abuser), ClientShare)
	wantReject(t, h.acquireFor(Ticket{Client: "abuser", Class: Critical}), ClientShare)
	// Unidentified requests are not counted and never refused for a share.
	u := h.waitFor(Ticket{})
	h.check(4, 2)
	h.l.ReleaseFor(abuser)
	if err := n.result(); err != nil {
		t.Fatalf("nice: %v", err)
	}
	h.l.ReleaseFor(abuser)
	if err := u.result(); err != nil {
		t.Fatalf("unidentified: %v", err)
	}
	h.l.ReleaseFor(abuser)
	h.l.ReleaseFor(abuser)
	h.l.ReleaseFor(nice)
	h.l.Release()
	h.check(0, 0)
	if len(h.l.s.clients) != 0 {
		t.Errorf("%d client entries left, want 0", len(h.l.s.clients))
	}
}

func TestClientShareDropsWaiterWhenShareShrinks(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 4, MaxLen: 8, MaxWait: time.Second})
	a, b := Ticket{Client: "a"}, Ticket{Client: "b"}
	h.mustAcquireFor(a, 1)
	h.mustAcquireFor(b, 3)
	wa := h.waitFor(a) // a: 1 held + 1 waiting ≤ share 4/2
	// Three more clients arrive: the share drops to max(1, 4/5) = 1.
	var ws []*pendingAcquire
	for _, k := range []string{"c", "d", "e"} {
		ws = append(ws, h.waitFor(Ticket{Client: k}))
	}
	// a's waiter is first, but a holds its share by now: it is dropped and
	// the slot goes to c.
	h.l.ReleaseFor(b)
	wantReject(t, wa.result(), ClientShare)
	if err := ws[0].result(); err != nil {
		t.Fatalf("c: %v", err)
	}
	h.check(4, 2)
	for range 2 {
		h.l.ReleaseFor(b)
	}
	for _, w := range ws[1:] {
		if err := w.result(); err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	for _, k := range []string{"a", "c", "d", "e"} {
		h.l.ReleaseFor(Ticket{Client: k})
	}
	h.check(0, 0)
	if len(h.l.s.clients) != 0 {
		t.Errorf("%d client entries left, want 0", len(h.l.s.clients))
	}
}

func (h *harness) mustAcquireFor(t Ticket, n int) {
	h.t.Helper()
	for range n {
		if err := h.acquireFor(t); err != nil {
			h.t.Fatalf("AcquireFor(%+v) = %v, want nil", t, err)
		}
	}
}

func TestReleaseForUnknownClientPanics(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 2})
	h.mustAcquireFor(Ticket{Client: "a"}, 1)
	defer func() {
		if recover() == nil {
			t.Fatal("ReleaseFor a client holding nothing did not panic")
		}
	}()
	h.l.ReleaseFor(Ticket{Client: "b"})
}

func TestClassString(t *testing.T) {
	for c, want := range map[Class]string{Critical: "critical", Default: "default", Sheddable: "sheddable", Class(9): "default"} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", c, got, want)
		}
	}
}

// TestStressClasses hammers one Limiter with every class and a few clients
// from many goroutines on the real clock under -race, with a tiny target so
// the overload paths run too. It asserts only invariants, never timings.
func TestStressClasses(t *testing.T) {
	const (
		limit      = 4
		goroutines = 32
		iterations = 200
	)
	l := NewLimiter(Limits{Concurrency: limit, MaxLen: 8, MaxWait: 5 * time.Millisecond,
		Target: 50 * time.Microsecond, Interval: 500 * time.Microsecond}, clock.Real{})
	var holding, peak atomic.Int64
	var outcomes sync.Map // Reason or error text → *atomic.Int64
	count := func(k string) {
		v, _ := outcomes.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range iterations {
				tk := Ticket{Class: Class((g + i) % 3)}
				if g%4 != 0 {
					tk.Client = []string{"a", "b", "c", "abuser", "abuser", "abuser"}[(g+i)%6]
				}
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%11 == 0 {
					go cancel()
				}
				err := l.AcquireFor(ctx, tk)
				cancel()
				var r *Rejection
				switch {
				case err == nil:
					n := holding.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					count("granted")
					runtime.Gosched()
					holding.Add(-1)
					l.ReleaseFor(tk)
				case errors.As(err, &r):
					count(string(r.Reason))
				case errors.Is(err, context.Canceled):
					count("cancelled")
				default:
					t.Errorf("AcquireFor: unexpected error %v", err)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("peak holders = %d, limit %d", p, limit)
	}
	if l.InFlight() != 0 || l.Queued() != 0 || l.Overloaded() {
		t.Errorf("after the storm: InFlight() = %d, Queued() = %d, Overloaded() = %v", l.InFlight(), l.Queued(), l.Overloaded())
	}
	l.mu.Lock()
	if n := len(l.s.clients); n != 0 {
		t.Errorf("%d client entries left, want 0", n)
	}
	l.mu.Unlock()
	total := int64(0)
	var summary []string
	outcomes.Range(func(k, v any) bool {
		total += v.(*atomic.Int64).Load()
		summary = append(summary, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if total != goroutines*iterations {
		t.Errorf("outcomes = %d, want %d", total, goroutines*iterations)
	}
	t.Logf("peak %d; %s", peak.Load(), strings.Join(summary, ", "))
}

func TestFastPathWithClientDoesNotAllocate(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 2}, clock.Real{})
	ctx := context.Background()
	keys := []Ticket{{Client: "10.0.0.1"}, {Client: "10.0.0.2", Class: Critical}, {Client: "key-3"}}
	l.AcquireFor(ctx, keys[0]) // warm the map and the spare entries
	l.ReleaseFor(keys[0])
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		tk := keys[i%len(keys)]
		i++
		if err := l.AcquireFor(ctx, tk); err != nil {
			panic(err)
		}
		l.ReleaseFor(tk)
	})
	if allocs != 0 {
		t.Fatalf("AcquireFor+ReleaseFor with a client allocates %v times, want 0", allocs)
	}
}

func TestRefusalsDoNotAllocate(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := NewLimiter(Limits{Concurrency: 1, MaxLen: 0}, clk)
	ctx := context.Background()
	if err := l.AcquireFor(ctx, Ticket{Client: "holder"}); err != nil {
		t.Fatal(err)
	}
	for _, tk := range []Ticket{{}, {Client: "other"}, {Client: "holder"}} {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := l.AcquireFor(ctx, tk); err == nil {
				panic("admitted")
			}
		})
		if allocs != 0 {
			t.Errorf("refusing %+v allocates %v times, want 0", tk, allocs)
		}
	}
}

func BenchmarkAcquireForRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("client/uncontended", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: 1}, clock.Real{})
		tk := Ticket{Client: "203.0.113.7", Class: Critical}
		b.ReportAllocs()
		for b.Loop() {
			if err := l.AcquireFor(ctx, tk); err != nil {
				b.Fatal(err)
			}
			l.ReleaseFor(tk)
		}
	})
	b.Run("client/many-clients", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: benchConcurrency}, clock.Real{})
		tks := make([]Ticket, 4096)
		for i := range tks {
			tks[i] = Ticket{Client: fmt.Sprintf("client-%d", i)}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			tk := tks[i%len(tks)]
			i++
			if err := l.AcquireFor(ctx, tk); err != nil {
				b.Fatal(err)
			}
			l.ReleaseFor(tk)
		}
	})
	b.Run("client/parallel", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: benchConcurrency}, clock.Real{})
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			tk := Ticket{Client: fmt.Sprintf("client-%d", n.Add(1))}
			for pb.Next() {
				if err := l.AcquireFor(ctx, tk); err != nil {
					panic(fmt.Sprint(err))
				}
				l.ReleaseFor(tk)
			}
		})
	})
	b.Run("refused/client-share", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: 1, MaxLen: 8, MaxWait: time.Second}, clock.Real{})
		tk := Ticket{Client: "abuser"}
		if err := l.AcquireFor(ctx, tk); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := l.AcquireFor(ctx, tk); err == nil {
				b.Fatal("admitted")
			}
		}
	})
}
