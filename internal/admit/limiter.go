package admit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Limits configure a Limiter. Concurrency must be ≥ 1; MaxLen and MaxWait
// may be 0 (no queue: a request that finds no free slot is rejected at once).
type Limits struct {
	Concurrency int
	MaxLen      int
	MaxWait     time.Duration
}

// retryAfterBusy is the hint given when a concurrency slot could not be had:
// slots free in milliseconds, but a client told "0" would retry in a tight loop.
const retryAfterBusy = time.Second

// Rejections are shared values, so refusing a request allocates nothing.
var (
	errQueueFull    = &Rejection{Reason: QueueFull, RetryAfter: retryAfterBusy}
	errQueueTimeout = &Rejection{Reason: QueueTimeout, RetryAfter: retryAfterBusy}
)

// Limiter bounds the requests in flight and the requests waiting for a slot.
// Waiters are served first in, first out; a waiter gives up after MaxWait.
// Its zero value is not usable; create one with NewLimiter. It is safe for
// concurrent use. Every successful Acquire must be paired with one Release.
type Limiter struct {
	clk clock.Clock

	mu       sync.Mutex
	limits   Limits
	inflight int
	head     *waiter // FIFO of waiters; head is served first
	tail     *waiter
	queued   int

	// Mirrors for lock-free reads by metrics.
	inflightGauge atomic.Int64
	queuedGauge   atomic.Int64
}

type waiter struct {
	ready      chan struct{} // receives once when granted a slot
	granted    bool          // guarded by Limiter.mu
	prev, next *waiter
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

// NewLimiter returns a Limiter with the given limits, timing waits on clk.
func NewLimiter(l Limits, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Limiter{clk: clk, limits: sanitize(l)}
}

// sanitize keeps the structural invariant (a finite limit of at least one)
// even if a caller passes garbage; config validation rejects such values first.
func sanitize(l Limits) Limits {
	l.Concurrency = max(l.Concurrency, 1)
	l.MaxLen = max(l.MaxLen, 0)
	l.MaxWait = max(l.MaxWait, 0)
	return l
}

// Acquire takes a slot, waiting up to MaxWait in the queue if none is free.
// It returns nil when the caller holds a slot (and must Release it), a
// *Rejection when a limit refused the request, or ctx.Err() (or
// context.DeadlineExceeded) when ctx ended first or its deadline has passed.
// A ctx that is already done gets its error even if a slot is free. On any
// error the Limiter is left as if Acquire had not been called. The
// uncontended path does not allocate.
func (l *Limiter) Acquire(ctx context.Context) error {
	done := ctx.Done()
	select {
	case <-done:
		return ctx.Err()
	default:
	}
	l.mu.Lock()
	if l.inflight < l.limits.Concurrency && l.head == nil {
		l.inflight++
		l.inflightGauge.Add(1)
		l.mu.Unlock()
		return nil
	}
	if l.queued >= l.limits.MaxLen || l.limits.MaxWait <= 0 {
		l.mu.Unlock()
		return errQueueFull
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(l.clk.Now()) {
		// ctx.Err() may still be nil: its timer fires a little after the deadline.
		l.mu.Unlock()
		return context.DeadlineExceeded
	}
	w := waiterPool.Get().(*waiter)
	l.push(w)
	maxWait := l.limits.MaxWait
	l.mu.Unlock()

	t := l.clk.NewTimer(maxWait)
	received := false // whether the grant was taken from w.ready
	select {
	case <-w.ready:
		received = true
	case <-t.C():
	case <-done:
	}
	t.Stop()
	err := ctx.Err() // once the caller has gone it gets no slot, whatever else happened
	l.mu.Lock()
	switch {
	case !w.granted: // timed out or cancelled while still queued
		l.remove(w)
		if err == nil {
			err = errQueueTimeout
		}
	case err != nil: // cancelled, but granted meanwhile: pass the slot on
		l.releaseLocked()
	}
	// Otherwise granted, possibly as the timer fired: the slot is kept, not lost.
	l.mu.Unlock()
	if w.granted && !received {
		<-w.ready // drain the grant so the waiter can be reused
	}
	w.granted = false
	waiterPool.Put(w)
	return err
}

// Release returns a slot taken by a successful Acquire, handing it straight
// to the oldest waiter if there is one. It panics if no slot is held.
func (l *Limiter) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
}

// releaseLocked gives up one held slot; l.mu must be held.
func (l *Limiter) releaseLocked() {
	if l.inflight <= 0 {
		panic("admit: Release without a successful Acquire")
	}
	if l.head != nil && l.inflight <= l.limits.Concurrency {
		l.grant(l.head) // the slot passes on; inflight is unchanged
		return
	}
	l.inflight--
	l.inflightGauge.Add(-1)
}

// SetLimits changes the limits in place, keeping in-flight and waiting
// requests, so a config reload never resets or doubles a limit. A lower
// concurrency takes effect as requests finish; a higher one admits waiters now.
func (l *Limiter) SetLimits(lim Limits) {
	lim = sanitize(lim)
	l.mu.Lock()
	l.limits = lim
	for l.head != nil && l.inflight < l.limits.Concurrency {
		l.inflight++
		l.inflightGauge.Add(1)
		l.grant(l.head)
	}
	// Waiters beyond a shrunken MaxLen stay until served or timed out.
	l.mu.Unlock()
}

// Limits returns the current limits.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits
}

// InFlight returns the number of slots held now (read without locking).
func (l *Limiter) InFlight() int { return int(l.inflightGauge.Load()) }

// Queued returns the number of requests waiting now (read without locking).
func (l *Limiter) Queued() int { return int(l.queuedGauge.Load()) }

func (l *Limiter) push(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.queued++
	l.queuedGauge.Add(1)
}

func (l *Limiter) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.queued--
	l.queuedGauge.Add(-1)
}

// grant must be called with l.mu held.
func (l *Limiter) grant(w *waiter) {
	l.remove(w)
	w.granted = true
	w.ready <- struct{}{}
}
