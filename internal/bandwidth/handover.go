package bandwidth

import "time"

// The bucket across an upgrade (the levee that takes over continues it):
// its state is one time line, kept relative to now since two processes
// share no monotonic clock. A nil *Limiter has no state: each does
// nothing (Ahead is 0).

// Ahead is how far past now the limiter's reservations run: its whole
// burst is free again that long after now.
func (l *Limiter) Ahead(now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(max(l.tat-max(l.ns(now), l.last), 0))
}

// Resume continues a bucket that was ahead by ahead at now (Ahead of the
// limiter taken over), or keeps its own if that is later.
func (l *Limiter) Resume(now time.Time, ahead time.Duration) {
	if l == nil || ahead <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.advance(now)
	l.tat = max(l.tat, t+int64(ahead))
}

// StartEmpty spends the whole burst at now, as if its bytes had just
// passed: for a bucket whose state cannot be taken over, so that an
// upgrade never hands out a fresh burst.
func (l *Limiter) StartEmpty(now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.advance(now)
	l.tat = max(l.tat, t+l.depth)
}

// Charge counts n bytes that passed elsewhere at now (the old levee's
// responses still streaming after an upgrade) as if reserved here: the
// bytes that ask after them wait their time. n ≤ 0 does nothing.
func (l *Limiter) Charge(now time.Time, n int64) {
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.advance(now)
	l.tat = max(l.tat, t) + cost(n, l.rate)
	l.pos += n
}

// advance moves the limiter's time to now (never back); callers hold mu.
func (l *Limiter) advance(now time.Time) int64 {
	t := max(l.ns(now), l.last)
	l.last = t
	l.integrateLocked(t)
	return t
}
