package admission

import (
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// Workers returns the goroutines b counts now, busy or idle.
func Workers(b *Budget) int { return b.pool.workers() }

// NewBudgetIdle is NewBudget with its goroutines ending after idle instead
// of a second.
func NewBudgetIdle(n int, idle time.Duration) *Budget {
	b := NewBudget(n)
	b.pool.idle = idle
	return b
}

// LimitsConfig is l as config writes it, validated.
func LimitsConfig(l Limits) (config.Limits, error) { return l.config() }
