package bandwidth

import (
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// guard bounds, in real time, how long a test waits for its goroutines. It is a deadline,
// never a way to order them.
const guard = 20 * time.Second

// driver is a fake clock that also knows its timers' deadlines, so a test can jump straight
// to the next one once every worker is blocked on a timer.
type driver struct {
	*clock.Fake
	mu     sync.Mutex
	timers []*drvTimer
}

type drvTimer struct {
	clock.Timer
	d       *driver
	at      time.Time
	stopped bool // guarded by d.mu
}

func newDriver() *driver { return &driver{Fake: clock.NewFake(epoch)} }

func (d *driver) NewTimer(dur time.Duration) clock.Timer {
	d.mu.Lock()
	t := &drvTimer{d: d, at: d.Fake.Now().Add(dur)}
	d.timers = append(d.timers, t)
	d.mu.Unlock()
	t.Timer = d.Fake.NewTimer(dur) // signals TimerCreated after t is recorded
	return t
}

func (t *drvTimer) Stop() bool {
	t.d.mu.Lock()
	t.stopped = true
	t.d.mu.Unlock()
	return t.Timer.Stop()
}

// next returns the earliest deadline still to come.
func (d *driver) next() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.Fake.Now()
	kept := d.timers[:0]
	var first time.Time
	for _, t := range d.timers {
		if t.stopped || !t.at.After(now) {
			continue
		}
		kept = append(kept, t)
		if first.IsZero() || t.at.Before(first) {
			first = t.at
		}
	}
	d.timers = kept
	return first, !first.IsZero()
}

// run drives active workers, which report on done when they finish, until all have
// finished. Whenever every live worker is blocked on a timer it advances the clock to the
// next deadline. hook is called after each advance and each finish (with the worker's
// name); it may start workers and returns how many it started.
func (d *driver) run(t *testing.T, done <-chan string, active int, hook func(finished string) int) {
	t.Helper()
	g := time.NewTimer(guard)
	defer g.Stop()
	for active > 0 {
		for active > 0 && d.Pending() < active {
			select {
			case <-d.TimerCreated():
			case name := <-done:
				active--
				active += hook(name)
			case <-g.C:
				t.Fatalf("workers did not block or finish within %v (active %d, pending %d)", guard, active, d.Pending())
			}
		}
		if active == 0 {
			return
		}
		at, ok := d.next()
		if !ok {
			t.Fatalf("%d workers blocked with no timer to fire", active)
		}
		d.Advance(at.Sub(d.Now()))
		active += hook("")
	}
}
