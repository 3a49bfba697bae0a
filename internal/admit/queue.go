package admit

import (
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Defaults for the overload detector (Limits.Target and Limits.Interval).
const (
	DefaultTarget   = 5 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
)

// shortWaitFactor derives the overload max wait from the target: a request
// that waited twice the target under overload is dropped.
const shortWaitFactor = 2

// sched is the admission policy without the blocking: slots, the per-class
// wait lists, per-client counts and the overload detector. It is not safe
// for concurrent use; a Limiter guards it with its mutex, and tests drive
// it directly on a fake clock. It reads the clock only when a queue exists.
type sched struct {
	clk    clock.Clock
	limits Limits
	// wake is called, with the lock held, once for every waiter granted a
	// slot or dropped from the queue by someone else.
	wake func(*waiter)

	inflight int
	queued   int
	lists    [numRanks]waitList

	// clients holds only clients that hold or wait for a slot; spare
	// recycles their entries so the steady state does not allocate.
	clients map[string]*client
	spare   []*client

	// patient: nothing is refused or dropped; a waiter waits until it is
	// granted or gives up, and a client over its fair share waits while
	// others are served (see NewPatient). Fixed at construction; beside
	// overloaded, so the two share a word (sched stays in the 240-byte
	// size class).
	patient    bool
	overloaded bool
	// sealed: admissions stop at ceiling as well as at the concurrency
	// (Limiter.Seal); an int32, to share the word too.
	sealed  bool
	ceiling int32
	// aboveSince is when the oldest waiter was first seen older than the
	// target in the current stretch; zero when it was last seen younger or
	// the queue was empty.
	aboveSince time.Time
	// belowSince, while overloaded, is when the oldest waiter was first seen
	// younger than the target in the current stretch (zero otherwise).
	belowSince time.Time

	// Mirrors for lock-free reads by metrics.
	inflightGauge   atomic.Int64
	queuedGauge     atomic.Int64
	overloadedGauge atomic.Bool
}

// maxSpareClients bounds the recycled client entries kept after a spike.
const maxSpareClients = 1024

type client struct {
	key     string
	held    int // slots held
	waiting int // waiters queued
}

type waitState uint8

const (
	waiting waitState = iota
	granted
	dropped
)

type waiter struct {
	ready      chan struct{} // receives once when granted or dropped
	state      waitState     // guarded by the Limiter's mutex
	rej        *Rejection    // why it was dropped
	rank       int
	cl         *client // nil if unidentified
	since      time.Time
	prev, next *waiter
}

// waitList is a doubly linked list of waiters in arrival order.
type waitList struct{ head, tail *waiter }

func (q *waitList) push(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

func newSched(l Limits, clk clock.Clock, wake func(*waiter)) *sched {
	return &sched{clk: clk, limits: sanitize(l), wake: wake} // clients made on the first waiter
}

func (s *sched) target() time.Duration {
	if s.limits.Target > 0 {
		return s.limits.Target
	}
	return DefaultTarget
}

func (s *sched) interval() time.Duration {
	if s.limits.Interval > 0 {
		return s.limits.Interval
	}
	return DefaultInterval
}

// shortWait is the max wait while overloaded.
func (s *sched) shortWait() time.Duration {
	return min(s.limits.MaxWait, shortWaitFactor*s.target())
}

// room is how many slots may be held: the concurrency, or below it the
// ceiling of a sealed limiter.
func (s *sched) room() int {
	if s.sealed {
		return min(s.limits.Concurrency, int(s.ceiling))
	}
	return s.limits.Concurrency
}

// share is the fair share of slots per active client.
func (s *sched) share() int {
	return max(1, s.limits.Concurrency/max(1, len(s.clients)))
}

// client returns the entry for key, creating it; nil for "".
func (s *sched) client(key string) *client {
	if key == "" {
		return nil
	}
	if c, ok := s.clients[key]; ok {
		return c
	}
	var c *client
	if n := len(s.spare); n > 0 {
		c, s.spare = s.spare[n-1], s.spare[:n-1]
	} else {
		c = new(client)
	}
	c.key = key
	if s.clients == nil {
		s.clients = make(map[string]*client)
	}
	s.clients[key] = c
	return c
}

// forget removes c if it holds and waits for nothing.
func (s *sched) forget(c *client) {
	if c == nil || c.held > 0 || c.waiting > 0 {
		return
	}
	delete(s.clients, c.key)
	c.key = ""
	if len(s.spare) < maxSpareClients {
		s.spare = append(s.spare, c)
	}
}

// tryTake takes a free slot for c if one is free and nobody waits.
func (s *sched) tryTake(c *client) bool {
	if s.inflight >= s.room() || s.queued > 0 {
		return false
	}
	s.inflight++
	s.inflightGauge.Add(1)
	if c != nil {
		c.held++
	}
	return true
}

// enqueue queues w (whose rank and cl are set) at now, or refuses it. On
// success it returns the longest w may wait.
func (s *sched) enqueue(now time.Time, w *waiter) (*Rejection, time.Duration) {
	if w.cl != nil {
		w.cl.waiting++ // counted from here, so no drop below can forget w's client
	}
	if s.patient {
		s.push(now, w)
		return nil, 0 // no max wait: only the caller's context ends the wait
	}
	if rej := s.refuse(now, w); rej != nil {
		if w.cl != nil {
			w.cl.waiting--
		}
		return rej, 0
	}
	s.push(now, w)
	if s.overloaded {
		return nil, s.shortWait()
	}
	return nil, s.limits.MaxWait
}

// push puts w at the back of its class's list.
func (s *sched) push(now time.Time, w *waiter) {
	w.since = now
	w.state = waiting
	s.lists[w.rank].push(w)
	s.queued++
	s.queuedGauge.Add(1)
}

// refuse says why w may not queue, if it may not, after making room for it
// by evicting a lower class from a full queue.
func (s *sched) refuse(now time.Time, w *waiter) *Rejection {
	s.update(now)
	switch {
	case w.rank == Sheddable.rank() && s.overloaded:
		return errShed
	case w.cl != nil && w.cl.held+w.cl.waiting > s.share(): // waiting counts w
		return errClientShare
	case s.limits.MaxLen <= 0 || s.limits.MaxWait <= 0:
		return errQueueFull
	case s.queued > s.limits.MaxLen, s.queued == s.limits.MaxLen && !s.evictBelow(w.rank):
		return errQueueFull
	}
	return nil
}

// evictBelow drops one waiter of a lower class than rank to make room: from
// the lowest class, the one that would be served last.
func (s *sched) evictBelow(rank int) bool {
	for r := numRanks - 1; r > rank; r-- {
		if w := s.pick(r, true); w != nil {
			s.drop(w, errShed)
			return true
		}
	}
	return false
}

// pick returns the waiter of rank r served first (or, if last, served last).
func (s *sched) pick(r int, last bool) *waiter {
	q := &s.lists[r]
	if s.overloaded != last { // LIFO under overload
		return q.tail
	}
	return q.head
}

// unlink takes w off its list; it leaves w's client entry in place.
func (s *sched) unlink(w *waiter) {
	s.lists[w.rank].remove(w)
	s.queued--
	s.queuedGauge.Add(-1)
	if w.cl != nil {
		w.cl.waiting--
	}
	if s.queued == 0 {
		s.aboveSince, s.belowSince = time.Time{}, time.Time{}
		s.setOverloaded(false)
	}
}

// leave takes a waiter that gave up (timeout, cancel) off the queue.
func (s *sched) leave(w *waiter) {
	s.unlink(w)
	s.forget(w.cl)
}

func (s *sched) drop(w *waiter, why *Rejection) {
	s.unlink(w)
	s.forget(w.cl)
	w.state, w.rej = dropped, why
	s.wake(w)
}

func (s *sched) grant(w *waiter) {
	s.unlink(w)
	if w.cl != nil {
		w.cl.held++
	}
	w.state = granted
	s.wake(w)
}

func (s *sched) setOverloaded(v bool) {
	if s.overloaded != v {
		s.overloaded = v
		s.overloadedGauge.Store(v)
	}
}

// update runs the overload detector at now. The queueing delay sampled is
// the age of the oldest waiter: the sojourn of the request served under
// FIFO, and still the standing delay under LIFO, where the request served
// is the freshest. Overload starts when the delay stayed at or above the
// target for a whole interval and ends when it stayed below the target for
// a whole interval, or the queue empties. While overloaded, waiters older than the short wait
// are dropped.
func (s *sched) update(now time.Time) {
	if s.queued == 0 {
		return // unlink reset the detector when the queue emptied
	}
	if now.Sub(s.oldest()) < s.target() {
		s.aboveSince = time.Time{}
		// Overload ends once the delay has stayed below the target for a
		// whole interval, as it began: dropping the stale waiters leaves a
		// young queue at once, and ending there would flip back to FIFO,
		// where every served request waits again, once per interval.
		if s.overloaded {
			if s.belowSince.IsZero() {
				s.belowSince = now
			}
			if now.Sub(s.belowSince) >= s.interval() {
				s.belowSince = time.Time{}
				s.setOverloaded(false)
			}
		}
		return
	}
	s.belowSince = time.Time{}
	if s.aboveSince.IsZero() {
		s.aboveSince = now
	}
	if !s.overloaded && now.Sub(s.aboveSince) < s.interval() {
		return
	}
	s.setOverloaded(true)
	short := s.shortWait()
	for r := range numRanks {
		for w := s.lists[r].head; w != nil && now.Sub(w.since) >= short; w = s.lists[r].head {
			s.drop(w, errQueueTimeout)
		}
	}
}

// oldest returns when the longest-waiting waiter queued; the queue must
// not be empty. Each list is in arrival order, so only heads compare.
func (s *sched) oldest() time.Time {
	var t time.Time
	for r := range numRanks {
		if h := s.lists[r].head; h != nil && (t.IsZero() || h.since.Before(t)) {
			t = h.since
		}
	}
	return t
}

// grantNext hands one slot to the next waiter, dropping on the way waiters
// whose client holds its fair share already. It reports whether it did.
func (s *sched) grantNext() bool {
	if s.patient {
		return s.grantPatient()
	}
	s.update(s.clk.Now())
	for {
		var w *waiter
		for r := 0; r < numRanks && w == nil; r++ {
			w = s.pick(r, false)
		}
		if w == nil {
			return false
		}
		if w.cl != nil && w.cl.held >= s.share() {
			s.drop(w, errClientShare)
			continue
		}
		s.grant(w)
		return true
	}
}

// grantPatient hands one slot to the first waiter, in class order and
// first in, first out, whose client holds less than its fair share; if every
// waiter's client holds its share, to the first waiter: a client over its
// share waits only while a client under its share waits too, and a slot is
// never left free while anyone waits. It reports whether it granted. The
// scan passes over the waiters of clients at their share, at most one per
// blocked caller; the clock is not read.
func (s *sched) grantPatient() bool {
	share := s.share()
	var first *waiter
	for r := range numRanks {
		for w := s.lists[r].head; w != nil; w = w.next {
			if w.cl == nil || w.cl.held < share {
				s.grant(w)
				return true
			}
			if first == nil {
				first = w
			}
		}
	}
	if first == nil {
		return false
	}
	s.grant(first)
	return true
}

// release gives up a slot held by c, passing it to a waiter if one may have it.
func (s *sched) release(c *client) {
	if s.inflight <= 0 || (c != nil && c.held <= 0) {
		panic("admit: Release without a successful Acquire")
	}
	if c != nil {
		c.held--
		s.forget(c)
	}
	if s.queued > 0 && s.inflight <= s.room() && s.grantNext() {
		return // the slot passes on; inflight is unchanged
	}
	s.inflight--
	s.inflightGauge.Add(-1)
}

// setLimits changes the limits and admits waiters into any new room.
func (s *sched) setLimits(l Limits) {
	s.limits = sanitize(l)
	for s.queued > 0 && s.inflight < s.room() && s.grantNext() {
		s.inflight++
		s.inflightGauge.Add(1)
	}
	// Waiters beyond a shrunken MaxLen stay until served or timed out.
}
