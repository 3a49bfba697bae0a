// Package protect keeps an app's backend pool within what it can take
// (backend_limits: inflight requests and a request rate) and, when the pool
// is saturated, refuses the heaviest clients first, so that one abusive
// client costs the others nothing.
//
// A back end that protects itself with a global limit answers 503 to every
// client alike once the limit trips; the well-behaved clients pay for the
// abuser. The Guard sits at the edge, in front of the pool, and knows who is
// asking:
//
//   - Inflight: at most Inflight requests of the app are at its backends at
//     once. Waiting for a slot follows admit's rules with fair share always
//     on: when no slot is free, a client holding Inflight ÷ active clients
//     slots is refused at once (backend-client-share), and a client within
//     its share waits (bounded) for the next slot.
//   - Rate: a GCRA bucket of Rate and Burst for the whole pool, exact over
//     any window. The upper part of the bucket is open to everyone; its
//     lower half (the reserve) only to clients that are not heavy — a client
//     is heavy when its share of the requests offered over the last one to
//     two seconds is above the mean share of the clients seen (above 1/64
//     with more than 64 clients). So under overload the heavy clients drain
//     the bucket down to the reserve and are then refused (backend-share),
//     while the others keep finding tokens; only when the others alone ask
//     for more than Rate is anyone refused for an empty bucket (backend-rate).
//     Offered requests (refused ones too) decide who is heavy, so an abuser
//     stays heavy however few of its requests get through.
//
// Requests without a client key count as one client.
package protect

import (
	"context"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/topk"
)

// The reasons a Guard gives (Levee-Reject). Inflight refusals are admit's
// reasons with this prefix: backend-queue-full, backend-queue-timeout,
// backend-client-share.
const (
	Prefix      = "backend-"
	ReasonRate  = admit.Reason(Prefix + "rate")
	ReasonShare = admit.Reason(Prefix + "share")
)

// The heavy-client sketch: how many clients it tracks and over what window.
const (
	trackedClients = 64
	shareWindow    = time.Second
)

// anonymous is the client key of requests without one; client keys
// (header values, addresses) never hold a NUL byte.
const anonymous = "\x00anonymous"

// Options configure a Guard. A zero Inflight and a zero Rate turn their
// limit off.
type Options struct {
	Inflight int
	// Wait bounds waiting for an inflight slot: MaxWait, Target and
	// Interval are used (see admit.Limits); the queue holds at most
	// Inflight waiters.
	Wait  admit.Limits
	Rate  ratelimit.Limit
	Clock clock.Clock
}

// Guard is one app pool's protection. Safe for concurrent use.
type Guard struct {
	clk     clock.Clock
	slots   *admit.Limiter    // nil when Inflight is off
	bucket  *ratelimit.Bucket // nil when Rate is off
	reserve int
	perSec  float64 // Rate in requests per second; 0 when off
	offered *topk.Sketch
	// Refusals by reason are shared and read-only, so refusing allocates
	// nothing: the pool's share; its rate, by the whole seconds until a
	// token is due (Retry-After's unit; up to a minute); and admit's
	// refusals of an inflight slot with the prefix.
	refuseShare admit.Rejection
	refuseRate  [61]admit.Rejection
	refuseSlot  [len(slotReasons)]admit.Rejection
}

// slotReasons are admit's refusals of a slot, as refuseSlot holds them prefixed.
var slotReasons = admit.Reasons

// New returns a Guard, or nil when both limits are off.
func New(o Options) *Guard {
	if o.Inflight <= 0 && o.Rate.Interval <= 0 {
		return nil
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	g := &Guard{clk: o.Clock, offered: topk.NewSketch(trackedClients, shareWindow),
		refuseShare: admit.Rejection{Reason: ReasonShare, RetryAfter: shareWindow}}
	for i := range g.refuseRate {
		g.refuseRate[i] = admit.Rejection{Reason: ReasonRate, RetryAfter: time.Duration(max(i, 1)) * time.Second}
	}
	for i, r := range slotReasons {
		g.refuseSlot[i] = admit.Rejection{Reason: Prefix + r, RetryAfter: admit.RetryAfterBusy}
	}
	if o.Inflight > 0 {
		w := o.Wait
		w.Concurrency, w.MaxLen = o.Inflight, o.Inflight
		g.slots = admit.NewLimiter(w, o.Clock)
	}
	if o.Rate.Interval > 0 {
		b, err := ratelimit.NewBucket(o.Rate, o.Clock.Now())
		if err != nil {
			panic("protect: invalid rate: " + err.Error()) // validated config: a broken invariant
		}
		g.bucket, g.reserve = b, o.Rate.Burst/2
		g.perSec = float64(time.Second) / float64(o.Rate.Interval)
	}
	return g
}

// Slot is an admitted request's hold on the pool; Release it once the
// backend has answered.
type Slot struct {
	g      *Guard
	ticket admit.Ticket
}

// Release gives the slot back.
func (s Slot) Release() {
	if s.g.slots != nil {
		s.g.slots.ReleaseFor(s.ticket)
	}
}

// Held is a request's two slots once the pool admitted it: its app's
// (App, the gate's) and the pool's (Pool). Release or ReleaseStatus gives
// both back; call one of them once.
type Held struct {
	App  admit.Releaser
	Pool Slot
}

var _ admit.StatusReleaser = (*Held)(nil)

// Release gives both slots back.
func (h *Held) Release() { h.ReleaseStatus(0) }

// ReleaseStatus gives both slots back, passing the status on to the
// app's (an adaptive limit samples it).
func (h *Held) ReleaseStatus(code int) {
	h.Pool.Release()
	admit.Release(h.App, code)
}

// Enter admits one request of client to the pool at now, waiting for an
// inflight slot at most until ctx ends or the wait bound. On success the
// caller must Release the slot. A refusal is an *admit.Rejection; any other
// error means ctx ended while waiting.
func (g *Guard) Enter(ctx context.Context, client string, now time.Time) (Slot, error) {
	if client == "" {
		client = anonymous
	}
	heavy := g.offered.AddHeavy(client, 1, now)
	s := Slot{g: g, ticket: admit.Ticket{Client: client}}
	if g.slots != nil {
		waited, err := g.slots.AcquireWait(ctx, s.ticket)
		if err != nil {
			if rej, ok := err.(*admit.Rejection); ok {
				return s, g.slotRefusal(rej)
			}
			return s, err
		}
		if waited > 0 {
			now = g.clk.Now()
		}
	}
	if g.bucket != nil {
		if err := g.spend(heavy, now); err != nil {
			s.Release()
			return s, err
		}
	}
	return s, nil
}

// spend takes one token from the pool bucket: from anywhere in it for a
// light client, from above the reserve for a heavy one.
func (g *Guard) spend(heavy bool, now time.Time) error {
	if heavy && g.reserve > 0 {
		if !g.bucket.Take(now, 1, g.reserve).Allowed {
			return &g.refuseShare
		}
		return nil
	}
	if d := g.bucket.Take(now, 1, 0); !d.Allowed {
		if secs := (d.RetryAfter + time.Second - 1) / time.Second; secs < time.Duration(len(g.refuseRate)) {
			return &g.refuseRate[secs]
		}
		return &admit.Rejection{Reason: ReasonRate, RetryAfter: d.RetryAfter}
	}
	return nil
}

// slotRefusal is admit's refusal rej of an inflight slot, prefixed.
func (g *Guard) slotRefusal(rej *admit.Rejection) *admit.Rejection {
	for i, r := range slotReasons {
		if r == rej.Reason && rej.RetryAfter == admit.RetryAfterBusy {
			return &g.refuseSlot[i]
		}
	}
	return &admit.Rejection{Reason: Prefix + rej.Reason, RetryAfter: rej.RetryAfter}
}

// Stats is the guard's state now: requests holding and waiting for an
// inflight slot, the inflight limit (0: off) and the rate per second (0: off).
type Stats struct {
	InFlight, Queued, InflightLimit int
	Rate                            float64
}

// Stats reads the guard's state; a nil Guard has none.
func (g *Guard) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	st := Stats{Rate: g.perSec}
	if g.slots != nil {
		st.InFlight, st.Queued, st.InflightLimit = g.slots.InFlight(), g.slots.Queued(), g.slots.Limits().Concurrency
	}
	return st
}
