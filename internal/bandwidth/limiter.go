package bandwidth

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Limiter paces the bytes of one app, in both directions, to Rate with bursts up to Burst.
// It is safe for concurrent use. Build it with New; the zero Limiter is not usable. A nil
// *Limiter means "no limit": its Reader and Writer return their argument unchanged and
// WaitN returns nil at once.
type Limiter struct {
	name     string
	chunk    int
	burst    int64 // bytes; kept by SetRate
	maxDelay int64 // ns
	minRate  int64 // the lowest rate at which one chunk passes within MaxDelay
	clock    clock.Clock
	real     bool      // clock is clock.Real: wrappers may reuse a *time.Timer
	epoch    time.Time // time 0 of the nanosecond time line below

	// gen counts SetRate calls, so that a waiter whose timer fires can tell
	// without the lock whether its time still holds.
	gen atomic.Uint64

	mu    sync.Mutex
	rate  int64 // bytes/s
	depth int64 // ns: the time Burst bytes take at rate
	tat   int64 // theoretical arrival time: the end of the last reservation, ns since epoch
	pos   int64 // bytes reserved since New, less those given back: tat's place in the queue
	last  int64 // latest now seen, so that time never runs backwards
	asked int64 // bytes asked for since New, granted or refused (Demand)
	asks  int64 // reservations asked for since New
	// queued is the bytes waiting integrated over time since New, in byte·s,
	// up to queuedAt (ns since epoch).
	queued   float64
	queuedAt int64
	// changed is closed by SetRate to wake waiters so that they re-time; made
	// by the first waiter after a change (nil until then).
	changed chan struct{}
	st      Stats
}

// Stats are a Limiter's counters since New. Export them as
// levee_bandwidth_bytes_total{app}, levee_bandwidth_delayed_bytes_total{app},
// levee_bandwidth_delay_seconds_total{app} and levee_bandwidth_cut_total{app}.
type Stats struct {
	Bytes        int64         // bytes granted (cancelled grants are taken off)
	DelayedBytes int64         // of those, bytes that had to wait
	Delay        time.Duration // total wait added, summed over grants
	Cut          int64         // transfers cut with ErrTooSlow
}

// New returns a Limiter for o after WithDefaults and Validate; it starts with a full burst.
func New(o Options) (*Limiter, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	_, real := o.Clock.(clock.Real)
	return &Limiter{
		name:     o.Name,
		rate:     o.Rate,
		chunk:    o.Chunk,
		burst:    o.Burst,
		depth:    depth(o.Burst, o.Rate),
		maxDelay: int64(o.MaxDelay),
		minRate:  max(1, (int64(o.Chunk)*int64(time.Second)+int64(o.MaxDelay)-1)/int64(o.MaxDelay)),
		clock:    o.Clock,
		real:     real,
		epoch:    o.Clock.Now(),
	}, nil
}

// Name returns Options.Name.
func (l *Limiter) Name() string { return l.name }

// Chunk returns the largest grant in bytes.
func (l *Limiter) Chunk() int { return l.chunk }

// Rate returns the rate in bytes per second now.
func (l *Limiter) Rate() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// SetRate changes the rate to rate bytes per second (clamped to 1..MaxRate,
// and to at least Chunk/MaxDelay so that a chunk can still pass) in place,
// at the clock's now. The bucket keeps its state in bytes: the bytes still
// queued stay queued and wait their turn at the new rate, the bytes the
// bucket can still pass at once stay what they were (Burst is kept), so a
// change never hands out a fresh burst. Waiters already queued are re-timed:
// a lowered rate holds them longer, a raised one lets them go sooner. Over
// any time t after the change at most rate·t + Burst bytes pass.
func (l *Limiter) SetRate(rate int64) {
	if l == nil {
		return
	}
	rate = min(max(rate, l.minRate, 1), MaxRate)
	l.mu.Lock()
	defer l.mu.Unlock()
	if rate == l.rate {
		return
	}
	now := max(l.ns(l.clock.Now()), l.last)
	l.last = now
	l.integrateLocked(now)
	if l.tat > now {
		// The queue beyond now, in bytes, is kept: its time scales by
		// old/new, rounded up (against the transfer).
		d := math.Ceil(float64(l.tat-now) * float64(l.rate) / float64(rate))
		l.tat = now + int64(min(d, float64(math.MaxInt64/4)))
	}
	l.rate = rate
	l.depth = depth(l.burst, rate)
	l.gen.Add(1)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// Demand is how many bytes have asked to pass: the measure of how much of
// a shared limit an instance wants (see cluster mode).
type Demand struct {
	// Asked is the bytes asked for since New: granted (passed or waiting)
	// or refused as too slow.
	Asked int64
	// Asks is how many reservations those were: Asked ÷ Asks is the mean
	// ask (a chunk, or what a reader read).
	Asks int64
	// Waiting is the bytes granted now that may not pass yet: the queue.
	Waiting int64
	// Queued is Waiting integrated over time since New, in byte·seconds:
	// its growth over an interval, divided by the interval, is the mean
	// queue, which a single sample of Waiting is a noisy measure of.
	Queued float64
}

// Demand returns the counters at the clock's now. Over an interval, the bytes
// that asked to pass are the passed ones (Asked − Waiting grew by them) plus
// the ones still waiting at its end.
func (l *Limiter) Demand() Demand {
	now := l.ns(l.clock.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	now = max(now, l.last)
	l.integrateLocked(now)
	w := int64(0)
	if q := l.tat - l.depth - now; q > 0 {
		w = int64(float64(q) * float64(l.rate) / float64(time.Second))
	}
	return Demand{Asked: l.asked, Asks: l.asks, Waiting: min(w, l.pos), Queued: l.queued}
}

// integrateLocked adds the queue's bytes from queuedAt to now to queued.
// Between two changes of tat or rate the queue, in time, falls by one ns per
// ns: q(t) = max(q₀ − t, 0).
func (l *Limiter) integrateLocked(now int64) {
	dt := now - l.queuedAt
	if dt <= 0 {
		return
	}
	q0 := float64(l.tat - l.depth - l.queuedAt)
	l.queuedAt = now
	if q0 <= 0 {
		return
	}
	d := float64(dt)
	var area float64 // ns²
	if q0 >= d {
		area = q0*d - d*d/2
	} else {
		area = q0 * q0 / 2
	}
	l.queued += area * float64(l.rate) / 1e18
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// Reservation is n bytes granted at a time on the limiter's clock. It is a value; making
// one allocates nothing.
type Reservation struct {
	l     *Limiter
	n     int64
	pos   int64  // the limiter's pos after this reservation: its end in the queue
	gen   uint64 // the limiter's gen when reserved: at holds while it is unchanged
	at    int64  // ns since epoch from which the bytes may pass
	delay int64  // at − now when reserved, ≥ 0
	// changed is closed when the rate changes after gen (nil when the
	// reservation did not have to wait).
	changed <-chan struct{}
}

// Delay is how long after the time it was made the reservation's bytes may pass.
func (r Reservation) Delay() time.Duration { return time.Duration(r.delay) }

// At is the time from which the reservation's bytes may pass, at the
// limiter's rate now: a SetRate since it was made re-times it.
func (r Reservation) At() time.Time {
	l := r.l
	if l.gen.Load() == r.gen {
		return l.epoch.Add(time.Duration(r.at))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch.Add(time.Duration(l.atLocked(r)))
}

// atLocked is when r's bytes may pass at the rate now: its end is where the
// queue's end (tat) is less the time of the bytes reserved after it.
func (l *Limiter) atLocked(r Reservation) int64 {
	if l.gen.Load() == r.gen {
		return r.at
	}
	end := l.tat - cost(max(l.pos-r.pos, 0), l.rate)
	return end - l.depth
}

// ReserveAt grants n bytes (1 ≤ n ≤ Chunk) at time now, in FIFO order behind every
// earlier reservation, and returns when they may pass (Reservation.Delay after now). When
// the wait would exceed MaxDelay it reserves nothing, counts a cut and returns a
// *TooSlowError. A now earlier than one already seen is taken as that one.
func (l *Limiter) ReserveAt(now time.Time, n int) (Reservation, error) {
	if n < 1 || n > l.chunk {
		return Reservation{}, fmt.Errorf("%w: %d", ErrInvalidN, n)
	}
	r, wait, ok := l.reserve(l.ns(now), int64(n), l.maxDelay)
	if !ok {
		return r, &TooSlowError{Limit: l.name, Wait: time.Duration(wait), MaxDelay: time.Duration(l.maxDelay)}
	}
	return r, nil
}

// CancelAt takes back a reservation whose bytes did not pass. Call it at most once, and
// only for bytes that were not and will not be transferred. A reservation whose time has
// come (now ≥ At) is not given back. The last reservation made is given back exactly, as
// if it had never been made; one that others have queued behind is not, because they are
// already scheduled after it: its slot (at most one chunk's time) goes unused.
func (r Reservation) CancelAt(now time.Time) {
	l := r.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.ns(now), l.last)
	if t >= l.atLocked(r) {
		return
	}
	if l.pos == r.pos {
		l.integrateLocked(t)
		l.tat -= cost(r.n, l.rate)
		l.pos -= r.n
	}
	l.st.Bytes -= r.n
	if r.delay > 0 {
		l.st.DelayedBytes -= r.n
		l.st.Delay -= time.Duration(r.delay)
	}
}

func (l *Limiter) ns(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

// reserve is GCRA over bytes with the wait taken rather than refused: the reservation ends
// at tat′ = max(tat, now) + cost(n) and its bytes may pass at tat′ − depth. It reserves
// nothing, and reports the wait and !ok, when that wait exceeds limit; it counts a cut when
// the wait also exceeds MaxDelay.
func (l *Limiter) reserve(now, n, limit int64) (r Reservation, wait int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = max(now, l.last)
	l.last = now
	l.integrateLocked(now)
	l.asked += n
	l.asks++
	end := max(l.tat, now) + cost(n, l.rate)
	at := max(end-l.depth, now)
	wait = at - now
	if wait > limit {
		if wait > l.maxDelay {
			l.st.Cut++
		}
		return Reservation{}, wait, false
	}
	l.tat = end
	l.pos += n
	l.st.Bytes += n
	if wait > 0 {
		l.st.DelayedBytes += n
		l.st.Delay += time.Duration(wait)
	}
	r = Reservation{l: l, n: n, pos: l.pos, gen: l.gen.Load(), at: at, delay: wait}
	if wait > 0 {
		r.changed = l.changedLocked()
	}
	return r, wait, true
}

// WaitN blocks until n bytes may pass, taking them in chunks so that other connections
// get their turn between them. It returns a *TooSlowError (and counts a cut) when a chunk
// would wait longer than MaxDelay; ctx.Err() when ctx ends first, giving back the pending
// chunk; and, without waiting, an error wrapping context.DeadlineExceeded when a chunk
// could not pass before ctx's deadline (read on the limiter's clock). Chunks already
// granted stay granted. n ≤ 0 returns nil.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	for n > 0 {
		c := min(n, l.chunk)
		if err := l.wait(ctx, c, nil); err != nil {
			return err
		}
		n -= c
	}
	return nil
}

// sleeper is a connection's reusable timer on the real clock, so that waiting allocates
// nothing after the first wait. clock.Timer has no Reset, so other clocks get a new timer
// per wait.
type sleeper struct{ t *time.Timer }

// wait waits for one chunk of n ≤ Chunk bytes; s may be nil.
func (l *Limiter) wait(ctx context.Context, n int, s *sleeper) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.ns(l.clock.Now())
	limit := l.maxDelay
	dl, hasDL := ctx.Deadline()
	if hasDL {
		limit = min(limit, max(l.ns(dl)-now, 0))
	}
	r, wait, ok := l.reserve(now, int64(n), limit)
	if !ok {
		if wait > l.maxDelay {
			return &TooSlowError{Limit: l.name, Wait: time.Duration(wait), MaxDelay: time.Duration(l.maxDelay)}
		}
		return &deadlineError{limit: l.name, wait: time.Duration(wait)}
	}
	for wait > 0 {
		changed := r.changed
		d := time.Duration(wait)
		if l.real && s != nil {
			if s.t == nil {
				s.t = time.NewTimer(d)
			} else {
				s.t.Reset(d) // Go ≥ 1.23 timers: no stale tick survives Stop or Reset
			}
			select {
			case <-s.t.C:
			case <-changed:
				s.t.Stop()
			case <-ctx.Done():
				s.t.Stop()
				return l.abandon(ctx, r)
			}
		} else {
			t := l.clock.NewTimer(d)
			select {
			case <-t.C():
			case <-changed:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				return l.abandon(ctx, r)
			}
		}
		if l.gen.Load() == r.gen {
			return nil // the time it was given still holds
		}
		wait = l.retime(&r)
	}
	return nil
}

// changedLocked is the channel the next SetRate closes; one is made per
// change, by its first waiter.
func (l *Limiter) changedLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// retime moves r to its time at the rate now and returns how long it still
// has to wait from the clock's now.
func (l *Limiter) retime(r *Reservation) int64 {
	now := l.ns(l.clock.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	now = max(now, l.last)
	r.at, r.gen, r.changed = l.atLocked(*r), l.gen.Load(), l.changedLocked()
	return r.at - now
}

// abandon gives r back after ctx ended during its wait and returns ctx.Err().
func (l *Limiter) abandon(ctx context.Context, r Reservation) error {
	r.CancelAt(l.clock.Now())
	return ctx.Err()
}
