package admission

import "time"

// Workers returns the goroutines b counts now, busy or idle.
func Workers(b *Budget) int { return b.pool.workers() }

// NewBudgetIdle is NewBudget with its goroutines ending after idle instead
// of a second.
func NewBudgetIdle(n int, idle time.Duration) *Budget {
	b := NewBudget(n)
	b.pool.idle = idle
	return b
}
