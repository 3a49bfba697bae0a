package forward

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// dialBudget bounds the connections dialled to one backend address
// (upstream.dial_rate): burst at once, then one every interval (GCRA: tat
// is when the budget is whole again). A dial beyond it waits for a token
// or, for a pool's dial, for a connection given back to the pool, which
// the request then takes instead of dialling (errDialDeferred). So a wave
// of cancelled requests, or a backend that restarts and drops every
// connection, refills the pool at a bounded rate and never becomes a dial
// storm. Safe for concurrent use.
type dialBudget struct {
	interval time.Duration
	burst    time.Duration // burst × interval: how far tat may run ahead of now

	mu       sync.Mutex
	tat      time.Time
	released chan struct{} // closed (and replaced) when a connection goes back while dials wait
	waiting  atomic.Int32
}

func newDialBudget(perSecond float64, burst int) *dialBudget {
	iv := time.Duration(float64(time.Second) / perSecond)
	return &dialBudget{interval: max(iv, 1), burst: time.Duration(max(burst, 1)) * max(iv, 1),
		released: make(chan struct{})}
}

// errDialDeferred ends a pool's dial that waited for the budget when a
// connection came back to the pool meanwhile: the request takes that one
// (exchange.acquire asks the pool again) rather than a new one.
var errDialDeferred = errors.New("forward: dial deferred: a connection came back to the pool")

// errDialBudget is a dial that could not get a token within its wait
// (upstream.dial_timeout): the request gets a 504, as one that waited too
// long for a connection.
var errDialBudget = errors.Join(fasthttp.ErrNoFreeConns,
	errors.New("forward: upstream.dial_rate spent: no new connection to the backend within the wait"))

// take spends a token at now, or says how long until one is there.
func (b *dialBudget) take(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) + b.interval - b.burst; wait > 0 {
		return wait
	}
	b.tat = tat.Add(b.interval)
	return 0
}

// refund gives back a token taken for a dial that opened nothing (refused,
// unreachable): the budget bounds the connections made, and a failed dial
// leaves no socket behind.
func (b *dialBudget) refund() {
	b.mu.Lock()
	b.tat = b.tat.Add(-b.interval)
	b.mu.Unlock()
}

// await waits for a token, up to wait; a pool's dial (yield) also ends,
// with errDialDeferred, when a connection is given back meanwhile. It
// reports whether the dial waited at all.
func (b *dialBudget) await(wait time.Duration, yield bool) (waited bool, err error) {
	now := time.Now()
	deadline := now.Add(wait)
	for {
		d := b.take(now)
		switch {
		case d == 0:
			return waited, nil
		case !now.Before(deadline), !yield && now.Add(d).After(deadline):
			return true, errDialBudget
		}
		waited = true
		b.waiting.Add(1)
		b.mu.Lock()
		released := b.released
		b.mu.Unlock()
		t := time.NewTimer(min(d, deadline.Sub(now)))
		select {
		case <-released:
			t.Stop()
			b.waiting.Add(-1)
			if yield {
				return true, errDialDeferred
			}
		case <-t.C:
			b.waiting.Add(-1)
		}
		now = time.Now()
	}
}

// gaveBack tells the dials waiting, if any, that a connection went back
// to the pool: one load when none waits.
func (b *dialBudget) gaveBack() {
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	close(b.released)
	b.released = make(chan struct{})
	b.mu.Unlock()
}
