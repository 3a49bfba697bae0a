package topk

import "time"

// Snapshot is a ClientTop's counts, for the levee an upgrade starts
// (Restore): every dimension's summaries, with each window's start kept
// relative to now, since two processes share no monotonic clock. Its
// fields are exported for encoding only.
type Snapshot struct {
	K  int
	By []TieredSnapshot // the dimensions that have counted
}

// TieredSnapshot is one dimension's tiers, finest first.
type TieredSnapshot struct {
	Dim   int // index in Dimensions
	Tiers [tiers]TierSnapshot
}

// TierSnapshot is one tier: Age is how long before now its current window
// started (negative: not started).
type TierSnapshot struct {
	Age       time.Duration
	Cur, Prev SummarySnapshot
}

// SummarySnapshot is one Space-Saving summary.
type SummarySnapshot struct {
	Slots       []SlotSnapshot
	Total, Base uint64
}

// SlotSnapshot is one tracked key.
type SlotSnapshot struct {
	Key        string
	Count, Err uint64
}

// Snapshot returns c's counts at now; nil for a nil ClientTop.
func (c *ClientTop) Snapshot(now time.Time) *Snapshot {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &Snapshot{K: c.k}
	for d, t := range c.by {
		if t == nil {
			continue
		}
		ts := TieredSnapshot{Dim: d}
		for i := range t.tiers {
			tr := &t.tiers[i]
			age := time.Duration(-1)
			if !tr.start.IsZero() {
				age = max(now.Sub(tr.start), 0)
			}
			ts.Tiers[i] = TierSnapshot{Age: age, Cur: tr.cur.snapshot(), Prev: tr.prev.snapshot()}
		}
		out.By = append(out.By, ts)
	}
	return out
}

func (s *spaceSaving) snapshot() SummarySnapshot {
	out := SummarySnapshot{Total: s.total, Base: s.base, Slots: make([]SlotSnapshot, len(s.slots))}
	for i, sl := range s.slots {
		out.Slots[i] = SlotSnapshot{Key: sl.key, Count: sl.count, Err: sl.err}
	}
	return out
}

// Restore replaces c's counts with snap's, taken at another levee's now
// that corresponds to this one's now. A snapshot of another K (the
// summaries' bounds depend on it), or nil, leaves c as it is.
func (c *ClientTop) Restore(now time.Time, snap *Snapshot) {
	if c == nil || snap == nil || snap.K != c.k {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ts := range snap.By {
		if ts.Dim < 0 || ts.Dim >= dimensions {
			continue
		}
		t := newTiered(c.k)
		for i := range t.tiers {
			tr, s := &t.tiers[i], ts.Tiers[i]
			if s.Age >= 0 {
				tr.start = now.Add(-s.Age)
			}
			tr.cur.restore(s.Cur)
			tr.prev.restore(s.Prev)
		}
		c.by[ts.Dim] = t
	}
}

// restore fills an empty summary from s: at most k slots, the heap and
// the index rebuilt.
func (s *spaceSaving) restore(snap SummarySnapshot) {
	s.total, s.base = snap.Total, snap.Base
	n := min(len(snap.Slots), s.k)
	if n == 0 {
		return
	}
	s.slots, s.heap, s.index = make([]slot, n), make([]int32, n), make(map[string]int32, n)
	for i, sl := range snap.Slots[:n] {
		s.slots[i] = slot{key: sl.Key, count: sl.Count, err: sl.Err, pos: int32(i)}
		s.heap[i] = int32(i)
		s.index[sl.Key] = int32(i)
	}
	for i := n/2 - 1; i >= 0; i-- {
		s.down(i)
	}
}
