package protect

// The backend slots across an upgrade: the levee that takes over holds a
// slot for each request the old one still has at the backends, until the
// old one reports it done. A nil Guard, or one without an in-flight
// limit, holds nothing.

// InFlight is the requests holding backend slots now.
func (g *Guard) InFlight() int {
	if g == nil || g.slots == nil {
		return 0
	}
	return g.slots.InFlight()
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
