package protect

import "time"

// The backend slots across an upgrade: the levee that takes over holds a
// slot for each request the old one still has at the backends, until the
// old one reports it done. A nil Guard, or one without an in-flight
// limit, holds nothing. The pool's rate bucket is taken over as the
// app's are (ratelimit.Bucket's Ahead, Resume, Charge): a nil Guard, or
// one without a rate, has none, and each of those does nothing.

// InFlight is the requests holding backend slots now.
func (g *Guard) InFlight() int {
	if g == nil || g.slots == nil {
		return 0
	}
	return g.slots.InFlight()
}

// Seal is admit.Limiter's Seal for the backend slots: it returns the
// ceiling it sets on them, until Unseal.
func (g *Guard) Seal(slack bool) int {
	if g == nil || g.slots == nil {
		return 0
	}
	return g.slots.Seal(slack)
}

// Unseal lifts Seal's ceiling.
func (g *Guard) Unseal() {
	if g != nil && g.slots != nil {
		g.slots.Unseal()
	}
}

// Hold counts n requests another levee has at the backends as holding
// slots here, over the limit if need be; Unhold gives them back.
func (g *Guard) Hold(n int) {
	if g != nil && g.slots != nil {
		g.slots.Hold(n)
	}
}

// Unhold gives back n slots taken by Hold.
func (g *Guard) Unhold(n int) {
	if g == nil || g.slots == nil {
		return
	}
	for range n {
		g.slots.Release()
	}
}

// RateAhead is how long after now the pool's rate bucket is full again (0:
// full, or no rate).
func (g *Guard) RateAhead(now time.Time) time.Duration {
	if g == nil || g.bucket == nil {
		return 0
	}
	return g.bucket.Ahead(now)
}

// ResumeRate continues the rate bucket of the guard taken over, which was
// ahead by ahead at now.
func (g *Guard) ResumeRate(now time.Time, ahead time.Duration) {
	if g != nil && g.bucket != nil {
		g.bucket.Resume(now, ahead)
	}
}

// StartRateEmpty spends the rate bucket's whole burst at now: its state
// could not be taken over.
func (g *Guard) StartRateEmpty(now time.Time) {
	if g != nil && g.bucket != nil {
		g.bucket.StartEmpty(now)
	}
}

// ChargeRate counts n requests the levee that handed over sent to the pool
// at now against the rate bucket.
func (g *Guard) ChargeRate(now time.Time, n int) {
	if g != nil && g.bucket != nil {
		g.bucket.Charge(now, n)
	}
}

// RateTaken is how many requests the rate bucket has admitted so far (0
// without a rate).
func (g *Guard) RateTaken() uint64 {
	if g == nil || g.bucket == nil {
		return 0
	}
	return g.bucket.Taken()
}
