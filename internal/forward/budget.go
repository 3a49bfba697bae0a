package forward

import (
	"sync"
	"time"
)

// Budget window: BudgetBuckets buckets of BudgetBucket each.
const (
	BudgetBucket  = time.Second
	BudgetBuckets = 10
)

// Budget caps retries at a share of requests over a sliding window of
// BudgetBuckets × BudgetBucket: a retry is allowed only if
// retries+1 ≤ percent/100 × requests + min, counting both over
// the window (in integers, so exactly). A percent of 0 allows no retry at all. Time is passed in; there is
// no goroutine. Safe for concurrent use (one mutex: two counter updates and
// a ten-bucket sum per decision).
type Budget struct {
	percent int64
	min     int64
	mu      sync.Mutex
	b       [BudgetBuckets]bucket
}

type bucket struct {
	at                int64 // index of the bucket's BudgetBucket since the Unix epoch
	requests, retries int64
}

// NewBudget returns a Budget allowing retries up to percent (0..100) of requests.
// min retries per window are allowed beyond the ratio (retry.min_per_window,
// 0 by default), so an app with little traffic can still retry if asked to.
func NewBudget(percent, min int) *Budget {
	return &Budget{percent: int64(percent), min: int64(min)}
}

// Request counts one request (not a retry) at now.
func (b *Budget) Request(now time.Time) {
	b.mu.Lock()
	b.at(now).requests++
	b.mu.Unlock()
}

// Retry reports whether one more retry fits the budget at now, and counts
// it if so.
func (b *Budget) Retry(now time.Time) bool {
	if b.percent <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.at(now)
	var requests, retries int64
	for i := range b.b {
		if x := &b.b[i]; x.at > cur.at-BudgetBuckets {
			requests, retries = requests+x.requests, retries+x.retries
		}
	}
	if 100*(retries+1) > b.percent*requests+100*b.min {
		return false
	}
	cur.retries++
	return true
}

// at returns the bucket of now, emptied if it last held an older second; b.mu is held.
func (b *Budget) at(now time.Time) *bucket {
	t := now.UnixNano() / int64(BudgetBucket)
	x := &b.b[uint64(t)%BudgetBuckets]
	if x.at != t {
		*x = bucket{at: t}
	}
	return x
}
