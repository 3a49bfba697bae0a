package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a manually advanced clock for tests. It is safe for concurrent use.
// Timers fire only inside Advance, in deadline order.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// waiters are notified whenever a timer is created, so tests can wait
	// for a goroutine to block on a timer instead of sleeping.
	created chan struct{}
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, created: make(chan struct{}, 1024)}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the clock is advanced past now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.c <- f.now
	} else {
		f.timers = append(f.timers, t)
	}
	f.mu.Unlock()
	select {
	case f.created <- struct{}{}:
	default:
	}
	return t
}

// TimerCreated returns a channel that receives once per timer created, so a
// test can wait until the code under test has started waiting.
func (f *Fake) TimerCreated() <-chan struct{} { return f.created }

// Pending returns the number of timers that have neither fired nor been stopped.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Advance moves the clock forward by d and fires every timer due by then.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	kept := f.timers[:0]
	var due []*fakeTimer
	for _, t := range f.timers {
		if !t.at.After(now) {
			t.fired = true
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	f.timers = kept
	f.mu.Unlock()
	// Deadline order, and creation order among equal deadlines.
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.c <- now
	}
}

type fakeTimer struct {
	f     *Fake
	at    time.Time
	c     chan time.Time
	fired bool // guarded by f.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			t.fired = true // a stopped timer never fires
			return true
		}
	}
	return false
}
