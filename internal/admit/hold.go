package admit

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
