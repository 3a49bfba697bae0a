package admit

import (
	"errors"
	"math"
)

// Hold counts n requests admitted elsewhere (by the levee an upgrade
// replaces, still finishing them) as holding slots of this limiter, over
// its concurrency if need be, so that the two processes together never
// exceed it: new requests wait or are refused until enough are given back.
// Each is given back with Release. n ≤ 0 does nothing.
func (l *Limiter) Hold(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.s.inflight += n
	l.s.inflightGauge.Add(int64(n))
	l.mu.Unlock()
}

// ErrSealed is AcquireFor's answer at a sealed limiter without a free
// slot under its ceiling: the request is not queued, as the levee that
// sealed it has handed over and drains; the one that serves now takes it.
var ErrSealed = errors.New("admit: sealed: this levee has handed over")

// Seal sets, and returns, a ceiling on the slots held: those held now,
// plus with slack an eighth of the concurrency (at least 1), within the
// concurrency, and never above the ceiling of an earlier Seal. Until
// Unseal, a request is admitted only below it; an arrival that finds no
// slot there gets ErrSealed at once, unqueued (waiters queued before still
// take the slots freed). The levee an upgrade replaces seals its limiters
// each time it reports to the new one, which holds as many slots as the
// ceiling says: as a ceiling only falls, the two together stay within the
// concurrency whatever either admits between reports. The slack, in the
// first reports, lets the old levee answer the requests it had read but
// not yet admitted (HTTP/2 streams that came before its GOAWAY) rather
// than turn them away.
func (l *Limiter) Seal(slack bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.s
	c := s.inflight
	if slack {
		c = min(c+sealSlack(s.limits.Concurrency), max(c, s.limits.Concurrency))
	}
	if s.sealed {
		c = min(c, int(s.ceiling))
	}
	c = min(c, math.MaxInt32)
	s.sealed, s.ceiling = true, int32(c)
	return c
}

// sealSlack is Seal's room above the slots held, for a concurrency of c.
func sealSlack(c int) int { return max(1, c/8) }

// Unseal lifts Seal's ceiling (the upgrade failed, and this levee serves
// on alone), admitting waiters into the room it had kept closed.
func (l *Limiter) Unseal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s.sealed {
		l.s.sealed = false
		l.s.setLimits(l.s.limits)
	}
}
