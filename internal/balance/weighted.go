package balance

import "sync"

// Weighted is smooth weighted round robin (as nginx does it): over every
// cycle of sum(weights) picks, backend i is chosen exactly weights[i] times,
// and picks of a heavy backend are spread through the cycle, not bunched.
// Safe for concurrent use.
type Weighted struct {
	mu      sync.Mutex
	weights []int
	current []int
	total   int
}

var _ Picker = (*Weighted)(nil)

// NewWeighted returns a Picker over backends with the given weights (each ≥ 1).
// With all weights equal it is plain round robin, lock-free.
func NewWeighted(weights []int) Picker {
	equal := true
	for _, w := range weights {
		equal = equal && w == weights[0]
	}
	if equal {
		return NewRoundRobin(len(weights))
	}
	w := &Weighted{weights: weights, current: make([]int, len(weights))}
	for _, x := range weights {
		w.total += max(x, 1)
	}
	return w
}

// Pick returns the backend with the highest running score, then lowers its
// score by the total weight.
func (w *Weighted) Pick() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	best := 0
	for i, x := range w.weights {
		w.current[i] += max(x, 1)
		if w.current[i] > w.current[best] {
			best = i
		}
	}
	w.current[best] -= w.total
	return best
}
