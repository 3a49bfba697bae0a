package ratelimit

import (
	"sync"
	"time"
)

// Bucket is the GCRA state of one key held alone, such as a backend pool's
// rate: one mutex, no map. Safe for concurrent use.
type Bucket struct {
	lim   Limit
	epoch time.Time
	mu    sync.Mutex
	tat   int64  // ns since epoch
	taken uint64 // units Take admitted, for an upgrade's reports (Taken)
}

// NewBucket returns a full bucket for lim; times passed to Take must not
// be before epoch.
func NewBucket(lim Limit, epoch time.Time) (*Bucket, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &Bucket{lim: lim, epoch: epoch}, nil
}

// Take admits n units at now only if keep more would still be admitted
// after them, and counts them if so; 0 ≤ n and n+keep ≤ Burst, else it
// rejects with RetryAfter Never. keep = 0 is plain GCRA. A refusal's
// RetryAfter is when n+keep units would conform. The admitted total never
// exceeds what GCRA admits, whatever keep is: keep only refuses more.
func (b *Bucket) Take(now time.Time, n, keep int) Decision {
	if n < 0 || keep < 0 || n+keep > b.lim.Burst {
		return reject
	}
	t := int64(now.Sub(b.epoch))
	b.mu.Lock()
	defer b.mu.Unlock()
	if keep > 0 {
		if _, d := b.lim.decide(b.tat, t, n+keep); !d.Allowed {
			return d
		}
	}
	next, d := b.lim.decide(b.tat, t, n)
	if d.Allowed {
		b.tat = next
		b.taken += uint64(n)
	}
	return d
}
