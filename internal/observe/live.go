package observe

import (
	"sync"
	"sync/atomic"
	"time"
)

// LiveSeconds is the span of the live rates the admin API reports: the
// last LiveSeconds whole seconds, the current (partial) one left out so a
// rate read early in a second is not low.
const LiveSeconds = 10

// liveSlots is the ring's length: the current second and LiveSeconds
// before it, rounded up to a power of two.
const liveSlots = 16

// secRing counts events per second over the last liveSlots seconds. Each
// slot packs its second (the low stampBits of the Unix time: the ring
// spans far less than their wrap) and its count in one word, so a count
// and a slot's turn to a new second are one atomic operation: no lock, no
// allocation. Safe for concurrent use.
type secRing [liveSlots]atomic.Uint64

const (
	countBits = 40 // a second's count stays below 2^40
	countMask = 1<<countBits - 1
)

func stampOf(sec int64) uint64 { return uint64(sec) << countBits }

// add counts n events in the second sec (a Unix time).
func (r *secRing) add(sec int64, n uint64) {
	s := &r[sec&(liveSlots-1)]
	stamp := stampOf(sec)
	for {
		v := s.Load()
		if v&^countMask == stamp {
			s.Add(n)
			return
		}
		// The slot holds an older second: start it afresh.
		if s.CompareAndSwap(v, stamp|n) {
			return
		}
	}
}

// sum is the count over the LiveSeconds whole seconds before now (a Unix
// time in seconds).
func (r *secRing) sum(now int64) uint64 {
	var n uint64
	window((*[liveSlots]atomic.Uint64)(r), now, func(v uint64) { n += v })
	return n
}

// window calls fn with the value of each of the LiveSeconds whole seconds
// before now that its slot still holds.
func window(r *[liveSlots]atomic.Uint64, now int64, fn func(uint64)) {
	for sec := now - LiveSeconds; sec < now; sec++ {
		if v := r[sec&(liveSlots-1)].Load(); v&^countMask == stampOf(sec) {
			fn(v & countMask)
		}
	}
}

// maxRing keeps the largest value seen per second, the same way.
type maxRing [liveSlots]atomic.Uint64

// note records v in the second sec.
func (r *maxRing) note(sec int64, v uint64) {
	s := &r[sec&(liveSlots-1)]
	stamp := stampOf(sec)
	v = min(v, countMask)
	for {
		old := s.Load()
		if old&^countMask == stamp && old&countMask >= v {
			return
		}
		if s.CompareAndSwap(old, stamp|v) {
			return
		}
	}
}

// max is the largest value over the LiveSeconds whole seconds before now.
func (r *maxRing) max(now int64) uint64 {
	var m uint64
	window((*[liveSlots]atomic.Uint64)(r), now, func(v uint64) { m = max(m, v) })
	return m
}

// Live is one app's recent traffic, for people rather than Prometheus:
// requests, refusals and shadow refusals by reason, and queue waits, per
// second over the last LiveSeconds. Recording costs an atomic add or two
// and allocates only the first time: the rings on the first event (so an
// app that has served nothing costs a few words), a reason's on its first.
// Safe for concurrent use; the zero value is ready.
type Live struct {
	rings    atomic.Pointer[liveRings] // nil until the first event
	rejected reasonRings
	// shadowed is nil until the first shadow refusal: most apps shadow no
	// limit, and a reasonRings is 48 bytes.
	shadowed atomic.Pointer[reasonRings]
}

type liveRings struct {
	requests  secRing
	waits     secRing // requests that queued
	waitMicro secRing // their waits, summed in µs
	waitMax   maxRing // the longest wait, in µs
}

// noRings is what a Live without events reads: shared, never written.
var noRings liveRings

// read returns the rings, noRings before the first event.
func (l *Live) read() *liveRings {
	if r := l.rings.Load(); r != nil {
		return r
	}
	return &noRings
}

// write returns the rings, made on the first event.
func (l *Live) write() *liveRings { return made(&l.rings) }

// made returns p's value, made on the first call. Safe for concurrent
// use: callers that race to make it all get the one that was stored.
func made[T any](p *atomic.Pointer[T]) *T {
	if v := p.Load(); v != nil {
		return v
	}
	p.CompareAndSwap(nil, new(T))
	return p.Load()
}

// reasonRings is a secRing per reason, made on a reason's first event.
type reasonRings struct{ m sync.Map } // string → *secRing

func (r *reasonRings) add(reason string, sec int64) {
	v, ok := r.m.Load(reason)
	if !ok {
		v, _ = r.m.LoadOrStore(reason, new(secRing))
	}
	v.(*secRing).add(sec, 1)
}

// rates is the per-second rate of each reason seen in the window; a nil
// r has none.
func (r *reasonRings) rates(now int64) map[string]float64 {
	out := noRates
	if r == nil {
		return out
	}
	r.m.Range(func(k, v any) bool {
		if n := v.(*secRing).sum(now); n > 0 {
			if len(out) == 0 {
				out = map[string]float64{}
			}
			out[k.(string)] = float64(n) / LiveSeconds
		}
		return true
	})
	return out
}

// noRates is the rates of a window without any: shared, never written.
var noRates = map[string]float64{}

// Request counts one answered request at now.
func (l *Live) Request(now time.Time) { l.write().requests.add(now.Unix(), 1) }

// Rejected counts one refusal for reason at now.
func (l *Live) Rejected(reason string, now time.Time) { l.rejected.add(reason, now.Unix()) }

// Shadowed counts one refusal a shadowed limit would have made.
func (l *Live) Shadowed(reason string, now time.Time) { made(&l.shadowed).add(reason, now.Unix()) }

// Waited records the queue wait d of a request admitted at now.
func (l *Live) Waited(d time.Duration, now time.Time) {
	sec, us := now.Unix(), uint64(max(d.Microseconds(), 0))
	r := l.write()
	r.waits.add(sec, 1)
	r.waitMicro.add(sec, min(us, 1<<30)) // a second's sum stays below 2^40
	r.waitMax.note(sec, us)
}

// LiveRates is an app's traffic per second over the last LiveSeconds.
type LiveRates struct {
	Requests float64 `json:"requests_per_second"`
	// Rejected and Shadowed are refusals per second by reason: what the
	// limits refused, and what shadowed limits would have.
	Rejected map[string]float64 `json:"rejected_per_second"`
	Shadowed map[string]float64 `json:"shadow_rejected_per_second"`
	// Queued is the rate of requests that waited for a slot; their mean and
	// longest waits, in milliseconds.
	Queued      float64 `json:"queued_per_second"`
	QueueWaitMs float64 `json:"queue_wait_mean_ms"`
	QueueMaxMs  float64 `json:"queue_wait_max_ms"`
}

// RequestRate is the requests per second over the window before now.
func (l *Live) RequestRate(now time.Time) float64 {
	return float64(l.read().requests.sum(now.Unix())) / LiveSeconds
}

// Rates reads the window that ends at now's second. A nil l reads zero.
func (l *Live) Rates(now time.Time) LiveRates {
	if l == nil {
		return LiveRates{Rejected: noRates, Shadowed: noRates}
	}
	sec, rings := now.Unix(), l.read()
	r := LiveRates{
		Requests: float64(rings.requests.sum(sec)) / LiveSeconds,
		Rejected: l.rejected.rates(sec),
		Shadowed: l.shadowed.Load().rates(sec),
	}
	n := rings.waits.sum(sec)
	r.Queued = float64(n) / LiveSeconds
	if n > 0 {
		r.QueueWaitMs = float64(rings.waitMicro.sum(sec)) / float64(n) / 1e3
	}
	r.QueueMaxMs = float64(rings.waitMax.max(sec)) / 1e3
	return r
}
