package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a LocalStore.
type Options struct {
	// MaxKeys bounds the number of keys held; required, > 0. Each shard holds at most
	// MaxKeys/Shards keys, so the table holds at most MaxKeys (rounded down to a multiple
	// of the shard count).
	MaxKeys int
	// Shards is the number of shards, a power of two no larger than MaxKeys; 0 means 64,
	// or the largest power of two ≤ MaxKeys when MaxKeys is below 64.
	Shards int
	// ScanInterval is the least time between two scans of one full shard for idle keys
	// made to admit a new key (Sweep is not limited by it); 0 means 10ms.
	ScanInterval time.Duration
}

// LocalStore is an in-process Store: GCRA state per key in a sharded table bounded by
// Options.MaxKeys. The package documentation describes its eviction guarantee. It is safe
// for concurrent use; it starts no goroutine. Create it with NewLocalStore.
type LocalStore struct {
	seed     maphash.Seed
	epoch    time.Time // timestamps are nanoseconds since epoch (monotonic when both sides have it)
	mask     uint64
	scanGap  int64
	shards   []shard
	overflow overflowBucket
	// observe, when set, is told every admission (Observe).
	observe atomic.Pointer[func(key string, n int)]
}

type shard struct {
	mu       sync.Mutex
	m        map[string]int64 // key → TAT
	capacity int
	minTAT   int64 // ≤ every TAT in m: no entry can be idle before it
	// overTAT is the latest overflow-bucket TAT after admitting a key of this shard:
	// a new entry starts from it, in case its key was one of them.
	overTAT  int64
	nextScan int64 // the earliest time this shard scans for idle keys when full
	evicted  uint64
	_        [64]byte // keep neighbouring shards' locks off this cache line
}

type overflowBucket struct {
	_     [64]byte
	tat   atomic.Int64
	count atomic.Uint64 // decisions made against the overflow bucket
	_     [64]byte
}

// NewLocalStore returns an empty LocalStore, or an error naming a bad option.
func NewLocalStore(o Options) (*LocalStore, error) {
	if o.MaxKeys <= 0 {
		return nil, fmt.Errorf("ratelimit: max keys %d must be > 0", o.MaxKeys)
	}
	n := o.Shards
	if n == 0 {
		n = 64
		for n > 1 && n > o.MaxKeys {
			n /= 2
		}
	}
	if n < 1 || n&(n-1) != 0 || n > 1<<16 || n > o.MaxKeys {
		return nil, fmt.Errorf("ratelimit: shards %d must be a power of two in 1..65536 and ≤ max keys %d", o.Shards, o.MaxKeys)
	}
	if o.ScanInterval < 0 {
		return nil, fmt.Errorf("ratelimit: scan interval %v must be ≥ 0", o.ScanInterval)
	}
	if o.ScanInterval == 0 {
		o.ScanInterval = 10 * time.Millisecond
	}
	s := &LocalStore{
		seed:    maphash.MakeSeed(),
		epoch:   time.Now(),
		mask:    uint64(n - 1),
		scanGap: int64(o.ScanInterval),
		shards:  make([]shard, n),
	}
	for i := range s.shards {
		s.shards[i] = shard{m: make(map[string]int64), capacity: o.MaxKeys / n, minTAT: math.MaxInt64, nextScan: math.MinInt64, overTAT: math.MinInt64}
	}
	s.overflow.tat.Store(math.MinInt64)
	return s, nil
}

// Allow implements Store. It never blocks and ignores ctx; it fails only for an invalid
// lim or n, returning a rejecting Decision with RetryAfter Never.
func (s *LocalStore) Allow(_ context.Context, key string, lim Limit, now time.Time, n int) (Decision, error) {
	if err := lim.Validate(); err != nil {
		return reject, err
	}
	d := s.AllowAt(key, lim, now, n)
	if n < 0 || n > lim.Burst {
		return d, fmt.Errorf("%w: %d with burst %d", ErrInvalidN, n, lim.Burst)
	}
	return d, nil
}

// AllowAt decides n units of key at time now under lim, and counts them if admitted; n = 0
// reports the state without counting or creating anything. An invalid lim, or n < 0,
// rejects with RetryAfter Never; n > lim.Burst rejects with RetryAfter Never and the
// key's Remaining and Reset. For an existing key it allocates nothing.
func (s *LocalStore) AllowAt(key string, lim Limit, now time.Time, n int) Decision {
	d := s.allowAt(key, lim, now, n)
	if d.Allowed && n > 0 {
		if f := s.observe.Load(); f != nil {
			(*f)(key, n)
		}
	}
	return d
}

func (s *LocalStore) allowAt(key string, lim Limit, now time.Time, n int) Decision {
	if !lim.valid() || n < 0 {
		return reject
	}
	t := int64(now.Sub(s.epoch))
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	tat, ok := sh.m[key]
	if !ok {
		if len(sh.m) >= sh.capacity && !sh.reclaim(t, s.scanGap) {
			next, d := s.overflow.decide(lim, t, n)
			if d.Allowed {
				sh.overTAT = max(sh.overTAT, next)
			}
			sh.mu.Unlock()
			return d
		}
		// A new entry starts no fuller than the overflow bucket was after it last
		// admitted a key of this shard, in case that key was this one.
		tat = sh.overTAT
	}
	var next int64
	var d Decision
	if n > lim.Burst {
		_, d = lim.decide(tat, t, 0)
		d.Allowed, d.RetryAfter = false, Never
	} else {
		next, d = lim.decide(tat, t, n)
	}
	if d.Allowed && n > 0 {
		if !ok {
			// Callers may pass a string over a reused buffer (fasthttp): own it.
			key = strings.Clone(key)
		}
		sh.m[key] = next
		if !ok {
			sh.minTAT = min(sh.minTAT, next)
		}
	}
	sh.mu.Unlock()
	return d
}

// reclaim makes room in a full shard by removing idle entries (TAT ≤ t), if some can
// be idle and the shard was not scanned within the last scan gap. It reports whether
// there is room. The caller holds sh.mu.
func (sh *shard) reclaim(t, gap int64) bool {
	if t < sh.minTAT || t < sh.nextScan {
		return false
	}
	sh.nextScan = t + gap
	sh.sweep(t)
	return len(sh.m) < sh.capacity
}

// sweep removes the entries with TAT ≤ t and recomputes minTAT; the caller holds sh.mu.
func (sh *shard) sweep(t int64) int {
	removed, least := 0, int64(math.MaxInt64)
	for k, tat := range sh.m {
		if tat <= t {
			delete(sh.m, k)
			removed++
		} else {
			least = min(least, tat)
		}
	}
	sh.minTAT = least
	sh.evicted += uint64(removed)
	return removed
}

// decide is GCRA on the shared overflow bucket; it returns the bucket's TAT after the
// decision. The caller holds the lock of the key's shard, so that the shard's overTAT
// is updated before any other request of the same key can create its entry.
func (o *overflowBucket) decide(lim Limit, t int64, n int) (int64, Decision) {
	o.count.Add(1)
	for {
		old := o.tat.Load()
		if n > lim.Burst {
			_, d := lim.decide(old, t, 0)
			d.Allowed, d.RetryAfter = false, Never
			return old, d
		}
		next, d := lim.decide(old, t, n)
		if !d.Allowed || next == old || o.tat.CompareAndSwap(old, next) {
			return next, d
		}
	}
}

// Sweep removes every key whose bucket is full at now (TAT ≤ now), which changes no
// decision, and returns how many it removed. An owner calls it periodically (every few
// seconds is plenty) to bound memory to the active keys. It locks one shard at a time.
func (s *LocalStore) Sweep(now time.Time) int {
	t := int64(now.Sub(s.epoch))
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if t >= sh.minTAT {
			removed += sh.sweep(t)
		}
		sh.mu.Unlock()
	}
	return removed
}

// Stats are counters of a LocalStore.
type Stats struct {
	Keys       int    // keys held now
	MaxKeys    int    // the bound on Keys
	Evicted    uint64 // idle keys removed so far (by Sweep and to make room)
	Overflowed uint64 // decisions made against the shared overflow bucket so far
}

// Stats returns the current counters; it locks one shard at a time, so it is not an
// atomic snapshot under concurrent use.
func (s *LocalStore) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.m)
		st.MaxKeys += sh.capacity
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	st.Overflowed = s.overflow.count.Load()
	return st
}
