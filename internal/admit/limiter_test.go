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

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a Limiter on a fake clock. Waiters run in goroutines; the
// harness waits for each to block on its queue timer before going on, so
// every step happens in a known order without sleeping.
type harness struct {
	t   *testing.T
	clk *clock.Fake
	l   *Limiter
}

func newHarness(t *testing.T, lim Limits) *harness {
	t.Helper()
	clk := clock.NewFake(epoch)
	return &harness{t: t, clk: clk, l: NewLimiter(lim, clk)}
}

// pendingAcquire is one Acquire running in its own goroutine.
type pendingAcquire struct {
	cancel context.CancelFunc
	done   chan error
}

// wait starts an Acquire that must queue, and returns once it is queued.
func (h *harness) wait() *pendingAcquire {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	w := &pendingAcquire{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- h.l.Acquire(ctx) }()
	<-h.clk.TimerCreated() // only a queued Acquire makes a timer
	return w
}

// result blocks until w's Acquire returns.
func (w *pendingAcquire) result() error { return <-w.done }

// running reports whether w's Acquire has not returned. Call it only when
// nothing can have woken w, so that the answer cannot change under the test.
func (w *pendingAcquire) running() bool {
	select {
	case err := <-w.done:
		w.done <- err
		return false
	default:
		return true
	}
}

// acquire runs an Acquire that must not queue.
func (h *harness) acquire() error {
	h.t.Helper()
	before := h.clk.Pending()
	err := h.l.Acquire(context.Background())
	if h.clk.Pending() != before {
		h.t.Fatalf("Acquire waited on a timer; the test expected it not to queue")
	}
	return err
}

func (h *harness) mustAcquire(n int) {
	h.t.Helper()
	for range n {
		if err := h.acquire(); err != nil {
			h.t.Fatalf("Acquire() = %v, want nil", err)
		}
	}
}

func (h *harness) check(inflight, queued int) {
	h.t.Helper()
	if got := h.l.InFlight(); got != inflight {
		h.t.Errorf("InFlight() = %d, want %d", got, inflight)
	}
	if got := h.l.Queued(); got != queued {
		h.t.Errorf("Queued() = %d, want %d", got, queued)
	}
}

func wantReject(t *testing.T, err error, reason Reason) {
	t.Helper()
	var r *Rejection
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Rejection (%s)", err, reason)
	}
	if r.Reason != reason {
		t.Errorf("Reason = %q, want %q", r.Reason, reason)
	}
	if r.RetryAfter <= 0 {
		t.Errorf("RetryAfter = %v, want > 0", r.RetryAfter)
	}
}

func TestFastPath(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 3, MaxLen: 10, MaxWait: time.Second})
	h.mustAcquire(3)
	h.check(3, 0)
	for i := 3; i > 0; i-- {
		h.l.Release()
		h.check(i-1, 0)
	}
	if h.clk.Pending() != 0 {
		t.Errorf("fast path left %d timers", h.clk.Pending())
	}
}

func TestRejectWhenFull(t *testing.T) {
	tests := []struct {
		name    string
		lim     Limits
		waiters int // queued before the rejected Acquire
	}{
		{"queue full", Limits{Concurrency: 2, MaxLen: 2, MaxWait: time.Second}, 2},
		{"no queue (max_len 0)", Limits{Concurrency: 2, MaxLen: 0, MaxWait: time.Second}, 0},
		{"no waiting (max_wait 0)", Limits{Concurrency: 2, MaxLen: 10, MaxWait: 0}, 0},
		{"no queue at all", Limits{Concurrency: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.lim)
			h.mustAcquire(tt.lim.Concurrency)
			for range tt.waiters {
				h.wait()
			}
			pending := h.clk.Pending()
			wantReject(t, h.acquire(), QueueFull)
			h.check(tt.lim.Concurrency, tt.waiters)
			if h.clk.Pending() != pending {
				t.Errorf("a rejected Acquire left a timer")
			}
		})
	}
}

func TestQueueTimeoutAtExactlyMaxWait(t *testing.T) {
	const maxWait = 50 * time.Millisecond
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: maxWait})
	h.mustAcquire(1)
	w := h.wait()

	h.clk.Advance(maxWait - time.Nanosecond)
	if h.clk.Pending() != 1 || !w.running() {
		t.Fatal("waiter gave up before max_wait")
	}
	h.check(1, 1)

	h.clk.Advance(time.Nanosecond)
	wantReject(t, w.result(), QueueTimeout)
	h.check(1, 0)
	h.l.Release()
	h.check(0, 0)
}

func TestGrantsAreFIFO(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 5, MaxWait: time.Second})
	h.mustAcquire(1)
	var ws []*pendingAcquire
	for range 5 {
		ws = append(ws, h.wait())
	}
	ws[2].cancel() // leaving the middle of the queue keeps the others' order
	if err := ws[2].result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v, want context.Canceled", err)
	}
	for _, i := range []int{0, 1, 3, 4} {
		h.l.Release() // hands the slot to the oldest waiter
		if err := ws[i].result(); err != nil {
			t.Fatalf("waiter %d: err = %v, want nil", i, err)
		}
		for _, j := range []int{0, 1, 3, 4} {
			if j > i && !ws[j].running() {
				t.Fatalf("waiter %d was served before waiter %d", j, i)
			}
		}
		h.check(1, map[int]int{0: 3, 1: 2, 3: 1, 4: 0}[i])
	}
	h.l.Release()
	h.check(0, 0)
}

func TestCancelWhileWaiting(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 2, MaxLen: 4, MaxWait: time.Second})
	h.mustAcquire(2)
	other := h.wait()
	w := h.wait()
	h.check(2, 2)

	w.cancel()
	if err := w.result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	h.check(2, 1)
	if h.clk.Pending() != 1 {
		t.Errorf("Pending() = %d, want 1: the cancelled waiter's timer must be stopped", h.clk.Pending())
	}
	// The limiter is as if the cancelled Acquire had never happened.
	h.l.Release()
	if err := other.result(); err != nil {
		t.Fatalf("other waiter: err = %v, want nil", err)
	}
	h.check(2, 0)
}

func TestCancelledContextIsRefused(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.l.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled even with a free slot", err)
	}
	h.check(0, 0)
}

// doneCounter is a context that counts the calls of Done, as a context
// that starts work on Done (the fasthttp engine's) would see them.
type doneCounter struct {
	context.Context
	dones atomic.Int64
}

func (c *doneCounter) Done() <-chan struct{} {
	c.dones.Add(1)
	return c.Context.Done()
}

func TestDoneIsCalledOnlyByAWait(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second})
	ctx := &doneCounter{Context: context.Background()}
	if err := h.l.AcquireFor(ctx, Ticket{Client: "c"}); err != nil {
		t.Fatal(err)
	}
	h.wait() // fills the queue
	wantReject(t, h.l.AcquireFor(ctx, Ticket{}), QueueFull)
	if n := ctx.dones.Load(); n != 0 {
		t.Fatalf("Done called %d times by a free slot and a refusal; want 0", n)
	}
	h.l.ReleaseFor(Ticket{Client: "c"}) // to the waiter, which keeps it
	queued := make(chan error, 1)
	go func() { queued <- h.l.AcquireFor(ctx, Ticket{}) }()
	<-h.clk.TimerCreated() // ctx's Acquire is queued
	h.l.Release()
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	if n := ctx.dones.Load(); n == 0 {
		t.Fatal("a queued Acquire did not call Done")
	}
}

// clockDeadline is a context whose deadline is on the fake clock and has
// passed there, though the context itself has not noticed yet — the window
// between a deadline and its context timer firing.
type clockDeadline struct {
	context.Context
	at time.Time
}

func (c clockDeadline) Deadline() (time.Time, bool) { return c.at, true }

func TestPassedDeadlineIsRefusedUpFront(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second})
	h.mustAcquire(1)
	ctx := clockDeadline{context.Background(), epoch}
	if err := h.l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	h.check(1, 0)
	if h.clk.Pending() != 0 {
		t.Error("a refused Acquire made a timer")
	}
}

// A deadline before the queue's max wait ends the wait at the deadline,
// as the request's own end (context.DeadlineExceeded), not a queue-timeout.
func TestDeadlineBoundsTheQueueWait(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second})
	h.mustAcquire(1)
	ctx := clockDeadline{context.Background(), epoch.Add(100 * time.Millisecond)}
	done := make(chan error, 1)
	go func() { done <- h.l.Acquire(ctx) }()
	<-h.clk.TimerCreated()
	h.clk.Advance(100 * time.Millisecond)
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded at the deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait outlived its deadline")
	}
	h.check(1, 0)
}

func TestGrantRacingTimeoutKeepsSlot(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second})
	h.mustAcquire(1)
	w := h.wait()

	// With the lock held, the timer fires and the slot is handed over, so
	// the waiter sees both: whichever it notices, it must keep the slot.
	h.l.mu.Lock()
	h.clk.Advance(time.Second)
	h.l.s.release(nil) // Release, for a test already holding l.mu
	h.l.mu.Unlock()

	if err := w.result(); err != nil {
		t.Fatalf("err = %v, want nil: the granted slot was lost", err)
	}
	h.check(1, 0)
	h.l.Release()
	h.check(0, 0)
}

func TestCancelRacingGrantPassesSlotOn(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 2, MaxWait: time.Second})
	h.mustAcquire(1)
	first := h.wait()
	second := h.wait()

	h.l.mu.Lock()
	first.cancel()
	h.l.s.release(nil) // Release under the held lock: grants first, whose caller has gone
	h.l.mu.Unlock()

	if err := first.result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("first: err = %v, want context.Canceled", err)
	}
	if err := second.result(); err != nil {
		t.Fatalf("second: err = %v, want nil: the slot should pass on", err)
	}
	h.check(1, 0)
	h.l.Release()
	h.check(0, 0)
}

func TestSetLimitsRaiseAdmitsWaiters(t *testing.T) {
	lim := Limits{Concurrency: 1, MaxLen: 4, MaxWait: time.Second}
	h := newHarness(t, lim)
	h.mustAcquire(1)
	ws := []*pendingAcquire{h.wait(), h.wait(), h.wait()}
	h.check(1, 3)

	lim.Concurrency = 3
	h.l.SetLimits(lim)
	for _, w := range ws[:2] {
		if err := w.result(); err != nil {
			t.Fatalf("err = %v, want nil", err)
		}
	}
	if !ws[2].running() {
		t.Fatal("third waiter admitted beyond the new limit")
	}
	h.check(3, 1)
	if got := h.l.Limits(); got != lim {
		t.Errorf("Limits() = %+v, want %+v", got, lim)
	}
}

func TestSetLimitsLowerDrains(t *testing.T) {
	lim := Limits{Concurrency: 3, MaxLen: 4, MaxWait: time.Second}
	h := newHarness(t, lim)
	h.mustAcquire(3)
	w := h.wait()

	lim.Concurrency = 1
	h.l.SetLimits(lim)
	h.check(3, 1) // nobody is evicted

	steps := []struct{ inflight, queued int }{
		{2, 1}, // 2 in flight is still over the limit of 1: the waiter waits
		{1, 1},
		{1, 0}, // now the slot passes to the waiter
	}
	for i, s := range steps {
		h.l.Release()
		if s.queued == 0 {
			if err := w.result(); err != nil {
				t.Fatalf("step %d: err = %v, want nil", i, err)
			}
		} else if !w.running() {
			t.Fatalf("step %d: waiter admitted over the lowered limit", i)
		}
		h.check(s.inflight, s.queued)
	}
	h.l.Release()
	h.check(0, 0)
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 1}, clock.NewFake(epoch))
	defer func() {
		if recover() == nil {
			t.Fatal("Release without Acquire did not panic")
		}
	}()
	l.Release()
}

func TestNewLimiterSanitizes(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: -5, MaxLen: -1, MaxWait: -time.Second}, nil)
	want := Limits{Concurrency: 1}
	if got := l.Limits(); got != want {
		t.Fatalf("Limits() = %+v, want %+v", got, want)
	}
}

func TestRejectionError(t *testing.T) {
	err := error(&Rejection{Reason: QueueTimeout, RetryAfter: time.Second})
	if got := err.Error(); !strings.Contains(got, "queue-timeout") || !strings.HasPrefix(got, "admit: ") {
		t.Errorf("Error() = %q", got)
	}
}

// TestStress hammers one Limiter from many goroutines on the real clock
// under -race. It asserts only invariants, never timings.
func TestStress(t *testing.T) {
	const (
		limit      = 4
		goroutines = 32
		iterations = 200
	)
	l := NewLimiter(Limits{Concurrency: limit, MaxLen: 8, MaxWait: 5 * time.Millisecond}, clock.Real{})
	var holding, peak atomic.Int64
	var granted, rejected, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range iterations {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%7 == 0 {
					cancel() // some callers are gone already, or go while queued
				} else if (g+i)%5 == 0 {
					go cancel()
				}
				err := l.Acquire(ctx)
				cancel()
				var r *Rejection
				switch {
				case err == nil:
					n := holding.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					granted.Add(1)
					runtime.Gosched() // hold the slot a moment so others queue
					holding.Add(-1)
					l.Release()
				case errors.As(err, &r):
					rejected.Add(1)
				case errors.Is(err, context.Canceled):
					cancelled.Add(1)
				default:
					t.Errorf("Acquire: unexpected error %v", err)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("peak holders = %d, limit %d", p, limit)
	}
	if l.InFlight() != 0 || l.Queued() != 0 {
		t.Errorf("after the storm: InFlight() = %d, Queued() = %d, want 0, 0", l.InFlight(), l.Queued())
	}
	if got := granted.Load() + rejected.Load() + cancelled.Load(); got != goroutines*iterations {
		t.Errorf("outcomes = %d, want %d", got, goroutines*iterations)
	}
	t.Logf("granted %d, rejected %d, cancelled %d, peak %d", granted.Load(), rejected.Load(), cancelled.Load(), peak.Load())
}

func TestFastPathDoesNotAllocate(t *testing.T) {
	l := NewLimiter(Limits{Concurrency: 1}, clock.Real{})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := l.Acquire(ctx); err != nil {
			panic(err)
		}
		l.Release()
	})
	if allocs != 0 {
		t.Fatalf("Acquire+Release allocates %v times, want 0", allocs)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: 1}, clock.Real{})
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := NewLimiter(Limits{Concurrency: benchConcurrency}, clock.Real{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := l.Acquire(ctx); err != nil {
					panic(fmt.Sprint(err))
				}
				l.Release()
			}
		})
	})
}

// benchConcurrency leaves every parallel benchmark goroutine a slot.
const benchConcurrency = 1 << 20

func TestAcquireWaitSaysHowLongTheRequestWaited(t *testing.T) {
	h := newHarness(t, Limits{Concurrency: 1, MaxLen: 1, MaxWait: time.Second, Target: time.Minute})
	ctx := context.Background()
	if d, err := h.l.AcquireWait(ctx, Ticket{}); d != 0 || err != nil {
		t.Fatalf("free slot: waited %v, %v; want 0, nil", d, err)
	}
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := h.l.AcquireWait(ctx, Ticket{})
		done <- result{d, err}
	}()
	<-h.clk.TimerCreated()
	h.clk.Advance(30 * time.Millisecond)
	h.l.Release()
	if r := <-done; r.d != 30*time.Millisecond || r.err != nil {
		t.Fatalf("queued: waited %v, %v; want 30ms, nil", r.d, r.err)
	}
	h.l.Release()
}
