package balance

import "time"

// Sequence adapts a load-blind Picker (RoundRobin, Weighted) to a Balancer
// over a Set: it skips unhealthy backends (asking the Picker again, up to
// Len times) and keeps the in-flight and request counts that the
// distribution statistics read. Safe for concurrent use if the Picker is.
type Sequence struct {
	set    *Set
	picker Picker
}

var _ Balancer = (*Sequence)(nil)

// NewSequence returns a Balancer that picks from s in the order of p, which
// must return indices in [0, s.Len()).
func NewSequence(s *Set, p Picker) *Sequence {
	return &Sequence{set: s, picker: p}
}

// NewRoundRobinSet is round robin over s, or smooth weighted round robin if
// the weights of s differ (see NewWeighted).
func NewRoundRobinSet(s *Set) *Sequence {
	w := make([]int, s.Len())
	for i, b := range s.backends {
		w[i] = b.Weight()
	}
	return NewSequence(s, NewWeighted(w))
}

// Set returns the Set q picks from.
func (q *Sequence) Set() *Set { return q.set }

// Done reports the end of a request picked as backend i.
func (q *Sequence) Done(i int, o Outcome, latency time.Duration, now time.Time) {
	q.set.Done(i, o, latency, now)
}

// Pick returns the Picker's next healthy backend, or NoBackend. key is ignored.
func (q *Sequence) Pick(_ string, now time.Time) int {
	if len(q.set.backends) == 0 {
		return NoBackend
	}
	for range len(q.set.backends) {
		i := q.picker.Pick()
		if b := q.set.backends[i]; b.Healthy(now) {
			b.begin()
			return i
		}
	}
	return NoBackend
}
