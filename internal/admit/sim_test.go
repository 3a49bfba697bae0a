package admit

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// sim drives the admission policy (sched) single-threaded on a fake clock:
// arrivals, service completions and queue timeouts are events in virtual
// time, so a run is deterministic and takes no real time. It performs the
// steps a Limiter performs for each (tryTake, enqueue, release, leave), with
// its timers replaced by timeout events.
type sim struct {
	t      *testing.T
	clk    *clock.Fake
	s      *sched
	events eventQueue
	seq    int
	reqs   map[*waiter]*simReq
	woken  []*waiter
	// held counts slots per client key, to check the scheduler's bookkeeping.
	held map[string]int
	peak int
}

type simReq struct {
	Ticket
	service time.Duration
	// done is called once with the outcome: nil when served.
	done func(*Rejection)
}

func newSim(t *testing.T, lim Limits) *sim {
	clk := clock.NewFake(epoch)
	m := &sim{t: t, clk: clk, reqs: map[*waiter]*simReq{}, held: map[string]int{}}
	m.s = newSched(lim, clk, func(w *waiter) { m.woken = append(m.woken, w) })
	return m
}

// at schedules fn at virtual time epoch+d.
func (m *sim) at(d time.Duration, fn func()) {
	m.seq++
	heap.Push(&m.events, event{at: epoch.Add(d), seq: m.seq, fn: fn})
}

func (m *sim) after(d time.Duration, fn func()) { m.at(m.clk.Now().Sub(epoch)+d, fn) }

// run processes events until none are left.
func (m *sim) run() {
	for m.events.Len() > 0 {
		e := heap.Pop(&m.events).(event)
		if d := e.at.Sub(m.clk.Now()); d > 0 {
			m.clk.Advance(d)
		}
		e.fn()
		m.settle()
	}
}

// settle handles the waiters woken by the last step, as their goroutines would.
func (m *sim) settle() {
	for len(m.woken) > 0 {
		w := m.woken[0]
		m.woken = m.woken[1:]
		r := m.reqs[w]
		delete(m.reqs, w)
		if w.state == granted {
			m.start(r)
		} else {
			r.done(w.rej)
		}
	}
}

func (m *sim) arrive(r *simReq) {
	c := m.s.client(r.Client)
	if m.s.tryTake(c) {
		m.start(r)
		return
	}
	w := &waiter{rank: r.Class.rank(), cl: c}
	rej, wait := m.s.enqueue(m.clk.Now(), w)
	if rej != nil {
		m.s.forget(c)
		r.done(rej)
		return
	}
	m.reqs[w] = r
	m.after(wait, func() {
		if w.state == waiting {
			delete(m.reqs, w)
			m.s.leave(w)
			r.done(errQueueTimeout)
		}
	})
}

// start runs r on a slot for its service time, then releases the slot.
func (m *sim) start(r *simReq) {
	m.held[r.Client]++
	total := 0
	for _, n := range m.held {
		total += n
	}
	m.peak = max(m.peak, total)
	if total > m.s.limits.Concurrency {
		m.t.Fatalf("%d slots held, limit %d", total, m.s.limits.Concurrency)
	}
	m.after(r.service, func() {
		m.held[r.Client]--
		var c *client
		if r.Client != "" {
			c = m.s.clients[r.Client]
		}
		m.s.release(c)
		r.done(nil)
	})
}

type event struct {
	at  time.Time
	seq int
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// tally counts outcomes by reason ("" for served).
type tally map[Reason]int

func (t tally) total() int {
	n := 0
	for _, v := range t {
		n += v
	}
	return n
}

func (t tally) success() float64 { return float64(t[""]) / float64(max(1, t.total())) }

func (t tally) record(rej *Rejection) {
	if rej == nil {
		t[""]++
		return
	}
	t[rej.Reason]++
}

// TestSimOverloadKeepsCritical offers 5x the capacity of a backend (32
// slots × ~5ms), 85% Sheddable, 10% Default, 5% Critical, open loop with
// Poisson arrivals for 3s of virtual time: Critical must keep ≥ 99.5%
// success (issue 3, point 7), and the backend must stay busy.
func TestSimOverloadKeepsCritical(t *testing.T) {
	const (
		slots    = 32
		service  = 5 * time.Millisecond
		overload = 5.0
		duration = 3 * time.Second
	)
	for _, prio := range []bool{true, false} {
		name := map[bool]string{true: "priorities", false: "all default (baseline)"}[prio]
		t.Run(name, func(t *testing.T) {
			m := newSim(t, Limits{Concurrency: slots, MaxLen: 1024, MaxWait: 50 * time.Millisecond})
			rng := rand.New(rand.NewPCG(1, 2))
			byClass := map[Class]tally{Critical: {}, Default: {}, Sheddable: {}}
			rate := overload * slots / service.Seconds() // arrivals per second
			busy := time.Duration(0)
			var arrive func()
			arrive = func() {
				if m.clk.Now().Sub(epoch) >= duration {
					return
				}
				class := Sheddable
				switch p := rng.Float64(); {
				case p < 0.05:
					class = Critical
				case p < 0.15:
					class = Default
				}
				sv := time.Duration(float64(service) * (0.8 + 0.4*rng.Float64()))
				tk := Ticket{Class: class}
				if !prio {
					tk.Class = Default
				}
				m.arrive(&simReq{Ticket: tk, service: sv, done: func(rej *Rejection) {
					byClass[class].record(rej)
					if rej == nil {
						busy += sv
					}
				}})
				m.after(time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), arrive)
			}
			m.at(0, arrive)
			m.run()

			util := float64(busy) / float64(slots*m.clk.Now().Sub(epoch))
			for _, c := range []Class{Critical, Default, Sheddable} {
				t.Logf("%-9s offered %6d, success %6.2f%%, outcomes %v", c, byClass[c].total(), 100*byClass[c].success(), map[Reason]int(byClass[c]))
			}
			t.Logf("backend utilisation %.1f%%, peak %d/%d", 100*util, m.peak, slots)
			if m.s.inflight != 0 || m.s.queued != 0 || len(m.s.clients) != 0 {
				t.Errorf("after the run: inflight %d, queued %d, clients %d", m.s.inflight, m.s.queued, len(m.s.clients))
			}
			if !prio {
				return
			}
			if got := byClass[Critical].success(); got < 0.995 {
				t.Errorf("critical success %.2f%%, want ≥ 99.5%%", 100*got)
			}
			if util < 0.95 {
				t.Errorf("backend utilisation %.1f%%, want ≥ 95%%", 100*util)
			}
		})
	}
}

// TestSimFairShare: one abusive client floods an app at 10x its capacity
// while ten well-behaved clients each keep at most their fair share (22
// slots / 11 clients = 2) of requests outstanding. The well-behaved are
// never refused; the abuser gets the rest of the capacity and no more.
func TestSimFairShare(t *testing.T) {
	const (
		slots    = 22
		nice     = 10
		duration = 5 * time.Second
	)
	m := newSim(t, Limits{Concurrency: slots, MaxLen: slots, MaxWait: 50 * time.Millisecond})
	rng := rand.New(rand.NewPCG(3, 4))
	service := func() time.Duration { return time.Duration(1+rng.IntN(9)) * time.Millisecond }
	abuse, good := tally{}, tally{}

	// The abuser: open loop, ~10x what the whole app can serve.
	var flood func()
	flood = func() {
		if m.clk.Now().Sub(epoch) >= duration {
			return
		}
		m.arrive(&simReq{Ticket: Ticket{Client: "abuser"}, service: service(), done: abuse.record})
		m.after(time.Duration(rng.ExpFloat64()*float64(time.Millisecond)/44), flood)
	}
	m.at(0, flood)

	// Each well-behaved client: closed loop, two requests outstanding at
	// most, with a think time between a reply and the next request.
	for i := range nice {
		key := string(rune('a' + i))
		var send func()
		send = func() {
			if m.clk.Now().Sub(epoch) >= duration {
				return
			}
			m.arrive(&simReq{Ticket: Ticket{Client: key}, service: service(), done: func(rej *Rejection) {
				good.record(rej)
				if rej != nil {
					t.Errorf("well-behaved client %s refused: %s at %v", key, rej.Reason, m.clk.Now().Sub(epoch))
				}
				m.after(time.Duration(rng.IntN(3))*time.Millisecond, send)
			}})
		}
		m.at(time.Duration(i)*100*time.Microsecond, send)
		m.at(time.Duration(i)*100*time.Microsecond+time.Millisecond, send)
	}
	m.run()

	t.Logf("well-behaved: %v; abuser: %v; peak %d/%d", map[Reason]int(good), map[Reason]int(abuse), m.peak, slots)
	if good.success() != 1 {
		t.Errorf("well-behaved success %.3f%%, want 100%%", 100*good.success())
	}
	if abuse[ClientShare] == 0 || abuse[""] == 0 {
		t.Errorf("abuser outcomes %v: want both served and client-share", map[Reason]int(abuse))
	}
	if m.s.inflight != 0 || m.s.queued != 0 || len(m.s.clients) != 0 {
		t.Errorf("after the run: inflight %d, queued %d, clients %d", m.s.inflight, m.s.queued, len(m.s.clients))
	}
}
