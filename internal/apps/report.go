package apps

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// report is what a levee that handed over admitted since its state, and
// what it still has in flight, by app: the levee that took over counts
// both against its own limits (ApplyReport), so that the two never run
// two budgets.
type report struct {
	Version  int
	Charges  map[string]appCharges // units admitted, by app, then key
	InFlight map[string]slots      // requests in flight now, by app
	Bytes    map[string]int64      // bytes limits.bandwidth granted, by app
	Backend  map[string]int64      // requests backend_limits.rate admitted, by app (version 2)
}

type appCharges struct {
	Rate, Clients map[string]int
}

// Reporter collects what this levee admits after handing over, for
// Take. Made by Table.Report; Stop ends it. Safe for concurrent use.
type Reporter struct {
	t    *Table
	wake chan struct{} // one token: something to report

	mu      sync.Mutex // taken before the table's
	charges map[string]appCharges
	stores  []*ratelimit.LocalStore // observed
	sent    map[string]sent         // each app's pool's counts at the last Take
	// relayed is what the levee this one took over from reported since
	// the last Take (ApplyReport): bytes and backend_limits.rate's
	// admissions, passed on with this one's own.
	relayed map[string]sent
	first   time.Time // the first Take's
}

// sealGrace is how long after its first report a levee that handed over
// keeps a slack in its limits' ceilings (admit.Limiter.Seal) for the
// requests it had read and not yet admitted when the new one began to
// serve: they reach admission within milliseconds (a second on a loaded
// machine); past it, the ceilings fall to what is in flight, and the new
// levee has every other slot while the old one drains.
const sealGrace = time.Second

// Report starts collecting every rate admission of the table's apps,
// from now on. Call it before ExportState, so that nothing admitted after
// the export escapes both.
func (t *Table) Report() *Reporter {
	r := &Reporter{t: t, wake: make(chan struct{}, 1), charges: map[string]appCharges{}, relayed: map[string]sent{}}
	t.reporter.Store(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	r.sent = t.sentLocked()
	for name, a := range t.apps {
		app, client := a.rates.Local()
		r.observe(app, name, func(c *appCharges) *map[string]int { return &c.Rate })
		r.observe(client, name, func(c *appCharges) *map[string]int { return &c.Clients })
	}
	return r
}

func (r *Reporter) observe(st *ratelimit.LocalStore, app string, field func(*appCharges) *map[string]int) {
	if st == nil {
		return
	}
	r.stores = append(r.stores, st)
	st.Observe(func(key string, n int) {
		r.mu.Lock()
		c := r.charges[app]
		m := field(&c)
		if *m == nil {
			*m = map[string]int{}
		}
		if _, ok := (*m)[key]; ok {
			(*m)[key] += n
		} else {
			(*m)[strings.Clone(key)] = n // key may be over a reused buffer (fasthttp)
		}
		r.charges[app] = c
		r.mu.Unlock()
		r.Poke()
	})
}

// relay adds what the levee this one took over from reported to what
// this one reports next: a levee that handed over while the one before
// it still drains passes that one's admissions on, so that they reach
// whoever holds the budget now. (Its requests in flight are passed on
// as this one's: inFlightLocked counts the slots held for them.)
func (r *Reporter) relay(rep *report) {
	r.mu.Lock()
	for app, c := range rep.Charges {
		mine := r.charges[app]
		mine.Rate = addCounts(mine.Rate, c.Rate)
		mine.Clients = addCounts(mine.Clients, c.Clients)
		r.charges[app] = mine
	}
	for app, n := range rep.Bytes {
		s := r.relayed[app]
		s.bytes += n
		r.relayed[app] = s
	}
	for app, n := range rep.Backend {
		s := r.relayed[app]
		s.backend += uint64(max(n, 0))
		r.relayed[app] = s
	}
	r.mu.Unlock()
	r.Poke()
}

// addCounts adds from's counts to to's, making to if need be.
func addCounts(to, from map[string]int) map[string]int {
	if len(from) == 0 {
		return to
	}
	if to == nil {
		to = make(map[string]int, len(from))
	}
	for k, n := range from {
		to[k] += n
	}
	return to
}

// Wake has a token when an admission has been collected since the last Take.
func (r *Reporter) Wake() <-chan struct{} { return r.wake }

// Poke puts a token in Wake (a request finished, say).
func (r *Reporter) Poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Take returns, encoded, the admissions collected since the last Take
// and the requests each app has in flight now.
func (r *Reporter) Take() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{Version: StateVersion, Charges: r.charges}
	now := r.t.o.Clock.Now()
	if r.first.IsZero() {
		r.first = now
	}
	r.t.mu.Lock()
	rep.InFlight = r.t.inFlightLocked(true, now.Sub(r.first) < sealGrace)
	taken := r.t.sentLocked()
	r.t.mu.Unlock()
	rep.Bytes, rep.Backend = map[string]int64{}, map[string]int64{}
	for name, n := range taken {
		if d := n.bytes - r.sent[name].bytes; d > 0 {
			rep.Bytes[name] = d
		}
		if d := int64(n.backend - r.sent[name].backend); d > 0 {
			rep.Backend[name] = d
		}
	}
	for name, n := range r.relayed {
		if n.bytes > 0 {
			rep.Bytes[name] += n.bytes
		}
		if n.backend > 0 {
			rep.Backend[name] += int64(min(n.backend, math.MaxInt64))
		}
	}
	r.sent = taken
	r.charges, r.relayed = map[string]appCharges{}, map[string]sent{}
	return encode(rep)
}

// sent is what an app's pool has let through so far: the bytes
// limits.bandwidth granted and the requests backend_limits.rate admitted.
type sent struct {
	bytes   int64
	backend uint64
}

// sentLocked is every app's sent now. Callers hold t.mu.
func (t *Table) sentLocked() map[string]sent {
	out := make(map[string]sent, len(t.apps))
	for name, a := range t.apps {
		n := sent{backend: a.backendGuard().RateTaken()}
		if bw := a.bandwidth(); bw != nil {
			n.bytes = bw.Stats().Bytes
		}
		out[name] = n
	}
	return out
}

// Stop stops collecting, and relaying, and lifts the limits' seals: the
// upgrade failed and this levee serves on alone, or it has drained.
func (r *Reporter) Stop() {
	for _, st := range r.stores {
		st.Observe(nil)
	}
	if r.t.reporter.CompareAndSwap(r, nil) {
		r.t.mu.Lock()
		r.t.unsealLocked()
		r.t.mu.Unlock()
	}
}

// inFlightLocked is every app's requests in flight now, on its
// concurrency's slots and on backend_limits': this levee's own and
// those it holds for the levee it took over from, which may still be
// draining when this one hands over in its turn (three generations
// alive). The levee taking over holds them all, until the reports say
// they ended. With seal (a report, once this levee has handed over),
// each limiter is sealed and what is reported is its ceiling
// (admit.Limiter.Seal: the count, with slack a little more, never
// rising): this levee admits no more than the new one holds for it, so
// the two never exceed a limit together, whatever arrives at either
// between reports. Callers hold t.mu.
func (t *Table) inFlightLocked(seal, slack bool) map[string]slots {
	out := make(map[string]slots, len(t.apps))
	for name, a := range t.apps {
		var n slots
		if seal {
			n = slots{App: a.limiter.Seal(slack), Backend: a.backendGuard().Seal(slack)}
		} else {
			n = slots{App: a.limiter.InFlight(), Backend: a.backendGuard().InFlight()}
		}
		if n.App > 0 || n.Backend > 0 {
			out[name] = slots{App: max(n.App, 0), Backend: max(n.Backend, 0)}
		}
	}
	return out
}

// unsealLocked lifts every app's seal: the upgrade failed, or this levee
// stopped reporting. Callers hold t.mu.
func (t *Table) unsealLocked() {
	for _, a := range t.apps {
		a.limiter.Unseal()
		a.backendGuard().Unseal()
	}
}

// slots are an app's requests in flight: those holding its concurrency's
// slots, and those holding backend_limits' slots.
type slots struct{ App, Backend int }

// heldSlots are the slots an app holds for the levee this one took over
// from, each on the limiter it was taken from: an app recomposed with a
// new limiter (or guard) meanwhile starts from nothing on it.
type heldSlots struct {
	app   holding[*admit.Limiter]
	guard holding[*protect.Guard]
}

type holding[T comparable] struct {
	on T
	n  int
}

// set makes h hold want slots on on: it takes or gives back the
// difference, or starts afresh on a new on.
func (h *holding[T]) set(on T, want int, hold, give func(T, int)) {
	var zero T
	if h.on != on {
		h.on, h.n = on, 0 // the old one went with its app
	}
	if on == zero {
		return
	}
	switch {
	case want > h.n:
		hold(on, want-h.n)
	case want < h.n:
		give(on, h.n-want)
	}
	h.n = want
}

// ApplyReport counts a report of the levee this one took over from
// against the table's limits: its admissions are charged to the rate
// buckets (into debt if need be), the bytes its responses still send to
// the bandwidth buckets, the requests it sends to backend_limits.rate's,
// and its requests in flight hold slots of each app's concurrency until
// a later report gives them back.
func (t *Table) ApplyReport(b []byte) error {
	var rep report
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&rep); err != nil {
		return fmt.Errorf("apps: report: %w", err)
	}
	if !readable(rep.Version) {
		return fmt.Errorf("apps: report: version %d, this levee reads 1 to %d", rep.Version, StateVersion)
	}
	if r := t.reporter.Load(); r != nil {
		r.relay(&rep) // before t.mu: a Reporter's lock is taken first
	}
	now := t.o.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	// An app not composed yet keeps what is reported for it with its
	// pending state (pending.go); without one, it has nothing to charge.
	for name, c := range rep.Charges {
		if a, p := t.reported(name); a != nil {
			a.charge(c, now)
		} else if p != nil {
			p.charges.merge(c)
		}
	}
	for name, n := range rep.Bytes {
		if a, p := t.reported(name); a != nil {
			a.bandwidth().Charge(now, n)
		} else if p != nil {
			p.bytes += n
		}
	}
	for name, n := range rep.Backend {
		if a, p := t.reported(name); a != nil {
			a.backendGuard().ChargeRate(now, int(min(n, maxCharge)))
		} else if p != nil {
			p.backend += n
		}
	}
	t.holdLocked(rep.InFlight)
	return nil
}

// maxCharge bounds one charge to a bucket: far past any burst.
const maxCharge = math.MaxInt32

// reported is the app a report names, or its pending state when no app
// of the name is composed; both nil for neither. Callers hold t.mu.
func (t *Table) reported(name string) (*App, *pendingApp) {
	if a := t.apps[name]; a != nil {
		return a, nil
	}
	p, _ := t.pending.Peek(name)
	return nil, p
}

// charge counts c, admitted by the levee that handed over, against a's
// rate buckets at now.
func (a *App) charge(c appCharges, now time.Time) {
	app, client := a.rates.Local()
	chargeRate(app, c.Rate, a.rate, now)
	chargeRate(client, c.Clients, a.clientRate, now)
}

func chargeRate(st *ratelimit.LocalStore, keys map[string]int, lim ratelimit.Limit, now time.Time) {
	if st == nil {
		return
	}
	for k, n := range keys {
		st.Charge(k, lim, now, n)
	}
}

// ReleaseHeld gives back every slot held for the levee this one took
// over from: it has exited, and its requests with it.
func (t *Table) ReleaseHeld() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holdLocked(nil)
}

// holdLocked makes each app hold as many slots for the old levee as it
// has in flight (none for an app missing from inflight). Callers hold t.mu.
func (t *Table) holdLocked(inflight map[string]slots) {
	if t.held == nil {
		t.held = map[string]*heldSlots{}
	}
	for name, a := range t.apps {
		h := t.held[name]
		if h == nil {
			h = new(heldSlots)
			t.held[name] = h
		}
		want := inflight[name]
		h.app.set(a.limiter, want.App, (*admit.Limiter).Hold, func(l *admit.Limiter, n int) {
			for range n {
				l.Release()
			}
		})
		h.guard.set(a.backendGuard(), want.Backend, (*protect.Guard).Hold, (*protect.Guard).Unhold)
		if h.app.n == 0 && h.guard.n == 0 {
			delete(t.held, name)
		}
	}
	for name := range t.held {
		if _, ok := t.apps[name]; !ok {
			delete(t.held, name) // its slots went with the app
		}
	}
}
