package admit

import (
	"context"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Limits configure a Limiter. Concurrency must be ≥ 1; MaxLen and MaxWait
// may be 0 (no queue: a request that finds no free slot is rejected at once).
// Target and Interval tune the overload detector; 0 means DefaultTarget and
// DefaultInterval, and Limits reports them as given.
type Limits struct {
	Concurrency int
	MaxLen      int
	MaxWait     time.Duration
	// Target is the queueing delay the queue should stay under (default 5ms).
	// While overloaded, requests wait at most 2×Target (and MaxWait).
	Target time.Duration
	// Interval is how long the delay must stay at or above Target before
	// the queue counts as overloaded (default 100ms).
	Interval time.Duration
}

// RetryAfterBusy is the hint given when a concurrency slot could not be had:
// slots free in milliseconds, but a client told "0" would retry in a tight loop.
const RetryAfterBusy = time.Second

// Rejections are shared values, so refusing a request allocates nothing.
var (
	errQueueFull    = &Rejection{Reason: QueueFull, RetryAfter: RetryAfterBusy}
	errQueueTimeout = &Rejection{Reason: QueueTimeout, RetryAfter: RetryAfterBusy}
	errShed         = &Rejection{Reason: Shed, RetryAfter: RetryAfterBusy}
	errClientShare  = &Rejection{Reason: ClientShare, RetryAfter: RetryAfterBusy}
)

// Limiter bounds the requests in flight and the requests waiting for a slot,
// serving waiters by class, sharing slots fairly between clients and
// shedding under overload, as the package documentation describes.
// Its zero value is not usable; create one with NewLimiter. It is safe for
// concurrent use. Every successful Acquire must be paired with one Release,
// and every successful AcquireFor with one ReleaseFor of the same Client.
type Limiter struct {
	clk clock.Clock
	mu  sync.Mutex
	s   *sched
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

// NewLimiter returns a Limiter with the given limits, timing waits on clk
// (the real clock if nil).
func NewLimiter(l Limits, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Limiter{clk: clk, s: newSched(l, clk, notify)}
}

// NewPatient returns a Limiter of concurrency slots (at least 1) that never
// refuses: a request that finds no free slot waits, however long, until a
// slot is granted to it or its context ends; there is no queue bound, no max
// wait, no overload shedding and no ClientShare refusal. Fair share still
// holds, by waiting instead of refusing: a freed slot goes to the first
// waiter (by class, then first in, first out) whose client holds less than
// its fair share (concurrency ÷ clients holding or waiting, at least 1), or,
// when every waiting client holds its share, to the first waiter, so a slot
// is never idle while someone waits. Its waits read no clock. The waiters
// are the callers blocked in AcquireFor, so they bound the queue. It is the
// scheduler of the public admission.Budget; SetLimits uses only Concurrency.
func NewPatient(concurrency int) *Limiter {
	l := NewLimiter(Limits{Concurrency: concurrency}, clock.Real{})
	l.s.patient = true
	return l
}

// notify wakes a waiter; its channel has room for the one send it gets.
func notify(w *waiter) { w.ready <- struct{}{} }

// sanitize keeps the structural invariant (a finite limit of at least one)
// even if a caller passes garbage; config validation rejects such values first.
func sanitize(l Limits) Limits {
	l.Concurrency = max(l.Concurrency, 1)
	l.MaxLen = max(l.MaxLen, 0)
	l.MaxWait = max(l.MaxWait, 0)
	l.Target = max(l.Target, 0)
	l.Interval = max(l.Interval, 0)
	return l
}

// Acquire is AcquireFor with the zero Ticket: an unidentified Default request.
func (l *Limiter) Acquire(ctx context.Context) error {
	return l.AcquireFor(ctx, Ticket{})
}

// Release is ReleaseFor with the zero Ticket; it returns a slot taken by Acquire.
func (l *Limiter) Release() {
	l.ReleaseFor(Ticket{})
}

// AcquireFor takes a slot for t, waiting in the queue of t.Class if none is
// free. It returns nil when the caller holds a slot (and must ReleaseFor it
// with the same t.Client), a *Rejection when a limit refused the request, or
// ctx.Err() (or context.DeadlineExceeded) when ctx ended first or its
// deadline has passed. A ctx that is already done gets its error even if a
// slot is free. On any error the Limiter is left as if AcquireFor had not
// been called, except that a refusal is seen by the overload detector. The
// uncontended path does not allocate, with or without a Client.
func (l *Limiter) AcquireFor(ctx context.Context, t Ticket) error {
	_, err := l.AcquireWait(ctx, t)
	return err
}

// AcquireWait is AcquireFor that also returns how long a request that got
// its slot waited in the queue for it: 0 when a slot was free at once
// (the clock is then not read), or on error. It calls ctx.Done only when
// the request queues.
func (l *Limiter) AcquireWait(ctx context.Context, t Ticket) (time.Duration, error) {
	// Err, not Done: a context may start work on Done (the fasthttp
	// engine's watches the client's connection), which only a wait needs.
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	dl, _ := ctx.Deadline()
	p, err := l.begin(t, dl)
	if err != nil {
		return 0, err
	}
	return p.Wait(ctx)
}

// Pending is an admission begun where the caller may not wait (Begin): a
// slot taken, or a place in the queue. It ends in one Wait, after which
// the caller holds the slot as after AcquireFor if Wait returns nil, or in
// one Cancel.
type Pending struct {
	l       *Limiter
	w       *waiter // nil: the slot is taken
	since   time.Time
	maxWait time.Duration
}

// Begin is AcquireFor up to its wait, which it leaves to Wait: it takes a
// free slot, or queues t, or refuses it (a *Rejection, or ErrSealed), and
// never blocks. For a caller that must not wait (the event loop) and hands
// the wait, if any, to a goroutine. It reads no context: a caller with a
// deadline that may have passed uses AcquireFor.
func (l *Limiter) Begin(t Ticket) (Pending, error) { return l.begin(t, time.Time{}) }

// begin is Begin; dl (zero: none) is the caller's deadline, which refuses
// a request that would queue past it.
func (l *Limiter) begin(t Ticket, dl time.Time) (Pending, error) {
	l.mu.Lock()
	c := l.s.client(t.Client)
	if l.s.tryTake(c) {
		l.mu.Unlock()
		return Pending{l: l}, nil
	}
	if l.s.sealed {
		l.s.forget(c)
		l.mu.Unlock()
		return Pending{}, ErrSealed
	}
	now := l.clk.Now()
	if !dl.IsZero() && !dl.After(now) {
		// ctx.Err() may still be nil: its timer fires a little after the deadline.
		l.s.forget(c)
		l.mu.Unlock()
		return Pending{}, context.DeadlineExceeded
	}
	w := waiterPool.Get().(*waiter)
	w.rank, w.cl = t.Class.rank(), c
	rej, maxWait := l.s.enqueue(now, w)
	if rej != nil {
		l.s.forget(c)
		l.mu.Unlock()
		w.cl = nil
		waiterPool.Put(w)
		return Pending{}, rej
	}
	l.mu.Unlock()
	return Pending{l: l, w: w, since: now, maxWait: maxWait}, nil
}

// Queued reports whether p waits in the queue (else its slot is taken).
func (p Pending) Queued() bool { return p.w != nil }

// Wait ends p: for a place in the queue, it waits until the slot is
// granted, the request is dropped, the queue's bound passes (from Wait's
// call) or ctx ends, and returns how long the request waited since it
// queued, as AcquireWait does; for a slot taken, it returns at once.
func (p Pending) Wait(ctx context.Context) (time.Duration, error) {
	if p.w == nil {
		return 0, nil
	}
	l, maxWait := p.l, p.maxWait
	// A deadline before the queue's own bound is the wait's: its end is
	// the request's (context.DeadlineExceeded), not queue-timeout. So a
	// context needs no timer of its own for it (only Deadline is read).
	byDeadline := false
	if dl, ok := ctx.Deadline(); ok && (l.s.patient || dl.Sub(p.since) < maxWait) {
		maxWait, byDeadline = dl.Sub(p.since), true
	}
	if err := l.wait(ctx, p.w, maxWait, byDeadline); err != nil {
		return 0, err
	}
	return l.clk.Now().Sub(p.since), nil
}

// Cancel ends p without a slot for t, the Ticket it began with: the slot
// taken is released, the place in the queue left (a slot granted to it
// meanwhile passes on).
func (p Pending) Cancel(t Ticket) {
	if p.w == nil {
		p.l.ReleaseFor(t)
		return
	}
	p.l.wait(cancelled, p.w, 0, false)
}

// cancelled is a context that has ended: a wait on it only settles.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// wait blocks a queued w until it is granted or dropped, maxWait passes or
// ctx ends, and returns the outcome; byDeadline: maxWait is ctx's deadline.
func (l *Limiter) wait(ctx context.Context, w *waiter, maxWait time.Duration, byDeadline bool) error {
	received := false               // whether the wake was taken from w.ready
	if l.s.patient && !byDeadline { // no max wait
		select {
		case <-w.ready:
			received = true
		case <-ctx.Done():
		}
	} else {
		t := l.clk.NewTimer(maxWait)
		select {
		case <-w.ready:
			received = true
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
	err := ctx.Err() // once the caller has gone it gets no slot, whatever else happened
	l.mu.Lock()
	state := w.state
	switch state {
	case waiting: // timed out or cancelled while still queued
		l.s.leave(w)
		switch {
		case err != nil:
		case byDeadline:
			err = context.DeadlineExceeded
		default:
			err = errQueueTimeout
		}
	case granted:
		if err != nil { // cancelled, but granted meanwhile: pass the slot on
			l.s.release(w.cl)
		}
		// Otherwise granted, possibly as the timer fired: the slot is kept, not lost.
	case dropped:
		if err == nil {
			err = w.rej
		}
	}
	l.mu.Unlock()
	if state != waiting && !received {
		<-w.ready // drain the wake so the waiter can be reused
	}
	w.cl, w.rej = nil, nil
	waiterPool.Put(w)
	return err
}

// ReleaseFor returns a slot taken by a successful AcquireFor(ctx, t),
// handing it to the next waiter if there is one. It panics if t.Client
// holds no slot.
func (l *Limiter) ReleaseFor(t Ticket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c *client
	if t.Client != "" {
		c = l.s.clients[t.Client]
		if c == nil {
			panic("admit: ReleaseFor a client that holds no slot")
		}
	}
	l.s.release(c)
}

// SetLimits changes the limits in place, keeping in-flight and waiting
// requests, so a config reload never resets or doubles a limit. A lower
// concurrency takes effect as requests finish; a higher one admits waiters now.
func (l *Limiter) SetLimits(lim Limits) {
	l.mu.Lock()
	l.s.setLimits(lim)
	l.mu.Unlock()
}

// Limits returns the current limits.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.limits
}

// InFlight returns the number of slots held now (read without locking).
func (l *Limiter) InFlight() int { return int(l.s.inflightGauge.Load()) }

// Queued returns the number of requests waiting now (read without locking).
func (l *Limiter) Queued() int { return int(l.s.queuedGauge.Load()) }

// Overloaded reports whether the queue is overloaded now (read without
// locking): Sheddable arrivals are shed and waits are short.
func (l *Limiter) Overloaded() bool { return l.s.overloadedGauge.Load() }
