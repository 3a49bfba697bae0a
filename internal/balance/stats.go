package balance

import (
	"slices"
	"sync"
	"time"
)

// Share is one backend's part of the traffic over a window.
type Share struct {
	ID       string
	Weight   int
	Healthy  bool
	InFlight int64
	Latency  time.Duration // decayed EWMA at the end of the window
	Requests uint64        // picks in the window
	Share    float64       // Requests / all picks in the window
}

// Imbalance is max/mean of weight-normalised share (Requests/Weight) among
// the healthy backends: 1 is perfectly even, 1.5 means the busiest backend
// got 50% more than its fair part. It is 0 when no healthy backend was
// picked (no data).
func Imbalance(shares []Share) float64 {
	var sum, weights, top float64
	for _, s := range shares {
		if !s.Healthy {
			continue
		}
		w := float64(max(s.Weight, 1))
		sum += float64(s.Requests)
		weights += w
		top = max(top, float64(s.Requests)/w)
	}
	if sum == 0 {
		return 0
	}
	return top / (sum / weights)
}

// Counts is a snapshot of the lifetime request counters of a Set's
// backends, keyed by backend so that it survives reloads.
type Counts map[*Backend]uint64

// Counts returns the lifetime request count of every backend of s. O(Len),
// one allocation; for the metrics and admin layers, not the request path.
// While no backend has counted a request it is nil, which reads as zero
// for every backend (a new app's first mark costs nothing).
func (s *Set) Counts() Counts {
	if !slices.ContainsFunc(s.backends, func(b *Backend) bool { return b.requests.Load() > 0 }) {
		return nil
	}
	c := make(Counts, len(s.backends))
	for _, b := range s.backends {
		c[b] = b.requests.Load()
	}
	return c
}

// Shares returns each backend's share of the requests picked since the
// snapshot since (nil: since it was created), as read at now. A backend not
// in since (added by a reload) counts from zero.
func (s *Set) Shares(since Counts, now time.Time) []Share {
	out := make([]Share, len(s.backends))
	var total uint64
	for i, b := range s.backends {
		r := b.requests.Load()
		r -= min(since[b], r)
		total += r
		out[i] = Share{ID: b.id, Weight: b.Weight(), Healthy: b.Healthy(now),
			InFlight: b.inflight.Load(), Latency: b.Latency(now), Requests: r}
	}
	for i := range out {
		if total > 0 {
			out[i].Share = float64(out[i].Requests) / float64(total)
		}
	}
	return out
}

// Window measures shares over a sliding window of time: each Observe keeps a
// snapshot at most every span/8 and reports the shares since the newest
// snapshot at least span old (or the oldest kept). Safe for concurrent use;
// meant to be called by the metrics scrape or the admin API, with the Set
// current at the time (reloads keep counting for carried backends).
type Window struct {
	span  time.Duration
	mu    sync.Mutex
	marks []mark
}

type mark struct {
	at     time.Time
	counts Counts
}

// NewWindow returns a Window over span (> 0).
func NewWindow(span time.Duration) *Window { return &Window{span: max(span, 1)} }

// Observe returns the shares of s's backends over the window ending at now
// and their Imbalance.
func (w *Window) Observe(s *Set, now time.Time) ([]Share, float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.marks); n == 0 || now.Sub(w.marks[n-1].at) >= w.span/8 {
		w.marks = append(w.marks, mark{at: now, counts: s.Counts()})
	}
	// Keep one mark at or before now−span as the base; drop older ones.
	k := 0
	for k+1 < len(w.marks) && !w.marks[k+1].at.After(now.Add(-w.span)) {
		k++
	}
	w.marks = append(w.marks[:0], w.marks[k:]...)
	shares := s.Shares(w.marks[0].counts, now)
	return shares, Imbalance(shares)
}
