package apps

import (
	"slices"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// Parked keeps evicted stored apps' state until their limits have
// settled, so that eviction never hands an app a fresh burst or a fresh
// concurrency limit: an app loaded again within that time takes its old
// state back, as across a reload. The zero Parked is empty and ready;
// guarded by its owner's lock.
type Parked[A any] struct {
	apps  map[string]parked[A]
	order []string // names in parking order; may hold names taken since
}

type parked[A any] struct {
	a     A
	until time.Time
}

// ParkMin is the least time an evicted app's state is kept: longer than
// a request normally takes, so the concurrency limit keeps counting those
// still in flight on the evicted route.
const ParkMin = time.Minute

// Settle is how long the state of stored app c, evicted, takes to settle:
// until every rate bucket (the app's, its clients', backend_limits') is
// full again (burst × interval after the last request at the latest) and
// ParkMin has passed.
func Settle(c *config.App) time.Duration {
	settle := ParkMin
	if c != nil {
		for _, lim := range []ratelimit.Limit{limitsconf.GCRA(c.Limits.Rate, c.Limits.Burst),
			limitsconf.GCRA(c.Limits.Client.Rate, c.Limits.Client.Burst), limitsconf.GCRA(c.BackendLimits.Rate, c.BackendLimits.Burst)} {
			settle = max(settle, time.Duration(lim.Burst)*lim.Interval) // a full bucket from empty; 0 when off
		}
	}
	return settle
}

// Park keeps a's state under name until until. At most limit apps are
// parked; beyond, the one parked longest is dropped, with drop.
func (p *Parked[A]) Park(name string, a A, until time.Time, limit int, drop func(A)) {
	if p.apps == nil {
		p.apps = map[string]parked[A]{}
	}
	p.apps[name] = parked[A]{a: a, until: until}
	p.order = append(p.order, name)
	for len(p.apps) > limit && len(p.order) > 0 {
		name := p.order[0]
		p.order = p.order[1:]
		if pa, ok := p.apps[name]; ok {
			delete(p.apps, name)
			drop(pa.a)
		}
	}
	if len(p.order) > 2*len(p.apps)+16 { // names taken back: compact
		p.order = slices.DeleteFunc(p.order, func(n string) bool { _, ok := p.apps[n]; return !ok })
	}
}

// Take returns the parked state of app name if it has not settled by
// now; settled state is dropped, with drop.
func (p *Parked[A]) Take(name string, now time.Time, drop func(A)) (A, bool) {
	pa, ok := p.apps[name]
	if !ok {
		var zero A
		return zero, false
	}
	delete(p.apps, name)
	if now.After(pa.until) {
		drop(pa.a)
		var zero A
		return zero, false
	}
	return pa.a, true
}

// Peek returns the state parked under name, leaving it parked.
func (p *Parked[A]) Peek(name string) (A, bool) {
	pa, ok := p.apps[name]
	return pa.a, ok
}

// Sweep drops, with drop, every state that has settled by now.
func (p *Parked[A]) Sweep(now time.Time, drop func(A)) {
	for name, pa := range p.apps {
		if now.After(pa.until) {
			delete(p.apps, name)
			drop(pa.a)
		}
	}
}
