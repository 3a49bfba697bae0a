package bandwidth

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Limiter paces the bytes of one app, in both directions, to Rate with bursts up to Burst.
// It is safe for concurrent use. Build it with New; the zero Limiter is not usable. A nil
// *Limiter means "no limit": its Reader and Writer return their argument unchanged and
// WaitN returns nil at once.
type Limiter struct {
	name     string
	rate     int64 // bytes/s
	chunk    int
	depth    int64 // ns: the time Burst bytes take
	maxDelay int64 // ns
	clock    clock.Clock
	real     bool      // clock is clock.Real: wrappers may reuse a *time.Timer
	epoch    time.Time // time 0 of the nanosecond time line below

	mu   sync.Mutex
	tat  int64 // theoretical arrival time: the end of the last reservation, ns since epoch
	last int64 // latest now seen, so that time never runs backwards
	st   Stats
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
		depth:    depth(o.Burst, o.Rate),
		maxDelay: int64(o.MaxDelay),
		clock:    o.Clock,
		real:     real,
		epoch:    o.Clock.Now(),
	}, nil
}

// Name returns Options.Name.
func (l *Limiter) Name() string { return l.name }

// Chunk returns the largest grant in bytes.
func (l *Limiter) Chunk() int { return l.chunk }

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
	cost  int64 // ns charged
	end   int64 // tat after this reservation
	at    int64 // ns since epoch from which the bytes may pass
	delay int64 // at − now when reserved, ≥ 0
}

// Delay is how long after the time it was made the reservation's bytes may pass.
func (r Reservation) Delay() time.Duration { return time.Duration(r.delay) }

// At is the time from which the reservation's bytes may pass.
func (r Reservation) At() time.Time { return r.l.epoch.Add(time.Duration(r.at)) }

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
	if t >= r.at {
		return
	}
	if l.tat == r.end {
		l.tat -= r.cost
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
	c := cost(n, l.rate)
	l.mu.Lock()
	defer l.mu.Unlock()
	now = max(now, l.last)
	l.last = now
	end := max(l.tat, now) + c
	at := max(end-l.depth, now)
	wait = at - now
	if wait > limit {
		if wait > l.maxDelay {
			l.st.Cut++
		}
		return Reservation{}, wait, false
	}
	l.tat = end
	l.st.Bytes += n
	if wait > 0 {
		l.st.DelayedBytes += n
		l.st.Delay += time.Duration(wait)
	}
	return Reservation{l: l, n: n, cost: c, end: end, at: at, delay: wait}, wait, true
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
	if wait <= 0 {
		return nil
	}
	d := time.Duration(wait)
	if l.real && s != nil {
		if s.t == nil {
			s.t = time.NewTimer(d)
		} else {
			s.t.Reset(d) // Go ≥ 1.23 timers: no stale tick survives Stop or Reset
		}
		select {
		case <-s.t.C:
			return nil
		case <-ctx.Done():
			s.t.Stop()
			return l.abandon(ctx, r)
		}
	}
	t := l.clock.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return l.abandon(ctx, r)
	}
}

// abandon gives r back after ctx ended during its wait and returns ctx.Err().
func (l *Limiter) abandon(ctx context.Context, r Reservation) error {
	r.CancelAt(l.clock.Now())
	return ctx.Err()
}
