package ratelimit

import (
	"hash/maphash"
	"math"
	"strings"
	"time"
)

// Entry is one key's GCRA state, relative to a moment: Ahead is how far
// past that moment its theoretical arrival time (TAT) was, that is, how
// long until its bucket is full again. Relative, because the two processes
// of an upgrade share no monotonic clock.
type Entry struct {
	Key   string
	Ahead time.Duration
}

// Export returns the state of every key whose bucket is not full at now,
// and the overflow bucket's Ahead (0 when full), for a store that takes
// over (Import). Keys with a full bucket need no state. It locks one
// shard at a time: under concurrent use it is not one snapshot.
func (s *LocalStore) Export(now time.Time) (keys []Entry, overflow time.Duration) {
	t := int64(now.Sub(s.epoch))
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, tat := range sh.m {
			if tat > t {
				keys = append(keys, Entry{Key: k, Ahead: time.Duration(tat - t)})
			}
		}
		sh.mu.Unlock()
	}
	if o := s.overflow.tat.Load(); o > t {
		overflow = time.Duration(o - t)
	}
	return keys, overflow
}

// Import takes over exported state at now: each key's TAT becomes now +
// Ahead, or stays where it is if that is later. Time spent between Export
// and Import is not credited back, so an import errs towards the stricter.
// A key that finds its shard full is decided, until there is room, by the
// overflow bucket, as a new key is: Import raises that bucket, and the
// floor new keys of the shard start from, to the key's TAT, rather than
// let it start full.
func (s *LocalStore) Import(now time.Time, keys []Entry, overflow time.Duration) {
	t := int64(now.Sub(s.epoch))
	for _, e := range keys {
		if e.Ahead <= 0 {
			continue
		}
		tat := t + int64(e.Ahead)
		sh := &s.shards[maphash.String(s.seed, e.Key)&s.mask]
		sh.mu.Lock()
		switch old, ok := sh.m[e.Key]; {
		case ok:
			sh.m[e.Key] = max(old, tat)
		case len(sh.m) < sh.capacity:
			sh.m[strings.Clone(e.Key)] = tat
			sh.minTAT = min(sh.minTAT, tat)
		default:
			sh.overTAT = max(sh.overTAT, tat)
			s.raiseOverflow(tat)
		}
		sh.mu.Unlock()
	}
	if overflow > 0 {
		s.raiseOverflow(t + int64(overflow))
	}
}

// StartEmpty makes every key start with an empty bucket of depth (Burst ×
// Interval of its limit) from now on, as if each had just spent its whole
// burst at now: for a store taking over state it cannot read, so that an
// upgrade never hands out a fresh burst. Keys held already keep their
// state, if later.
func (s *LocalStore) StartEmpty(now time.Time, depth time.Duration) {
	if depth <= 0 {
		return
	}
	tat := int64(now.Sub(s.epoch)) + int64(depth)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.overTAT = max(sh.overTAT, tat)
		for k, old := range sh.m {
			sh.m[k] = max(old, tat)
		}
		sh.mu.Unlock()
	}
	s.raiseOverflow(tat)
}

func (s *LocalStore) raiseOverflow(tat int64) {
	for {
		old := s.overflow.tat.Load()
		if old >= tat || old == math.MaxInt64 || s.overflow.tat.CompareAndSwap(old, tat) {
			return
		}
	}
}

// Observe makes f be told, after the decision, of every admission by
// AllowAt (the key, which f must copy to keep, and its units); nil stops
// it. For a levee that has handed over: what it still admits is charged
// to the one that took over (Charge). Admissions by the overflow bucket
// are told too, under their key.
func (s *LocalStore) Observe(f func(key string, n int)) {
	if f == nil {
		s.observe.Store(nil)
		return
	}
	s.observe.Store(&f)
}

// Charge counts n units of key admitted elsewhere at now under lim, even
// past its burst: the bucket goes into debt, and refuses until it has
// refilled. n ≤ 0 or an invalid lim does nothing.
func (s *LocalStore) Charge(key string, lim Limit, now time.Time, n int) {
	if n <= 0 || !lim.valid() {
		return
	}
	t := int64(now.Sub(s.epoch))
	cost := int64(min(n, lim.Burst*4)) * int64(lim.Interval) // bounded: no overflow
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tat, ok := sh.m[key]
	if !ok {
		if len(sh.m) >= sh.capacity && !sh.reclaim(t, s.scanGap) {
			sh.overTAT = max(sh.overTAT, t+cost)
			s.raiseOverflow(t + cost)
			return
		}
		tat = sh.overTAT
	}
	next := max(tat, t) + cost
	if !ok {
		key = strings.Clone(key)
		sh.minTAT = min(sh.minTAT, next)
	}
	sh.m[key] = next
}

// A Bucket across an upgrade, as a LocalStore's keys: its state is how far
// past now its TAT runs, since two processes share no monotonic clock.

// Ahead is how long after now the bucket is full again (0: full).
func (b *Bucket) Ahead(now time.Time) time.Duration {
	t := int64(now.Sub(b.epoch))
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(max(b.tat-t, 0))
}

// Resume continues a bucket that was ahead by ahead at now (Ahead of the
// bucket taken over), or keeps its own state if that is later.
func (b *Bucket) Resume(now time.Time, ahead time.Duration) {
	if ahead <= 0 {
		return
	}
	b.raise(int64(now.Sub(b.epoch)) + int64(min(ahead, MaxDepth)))
}

// StartEmpty spends the whole burst at now, as if it had just been taken:
// for a bucket whose state cannot be taken over, so that an upgrade never
// hands out a fresh burst.
func (b *Bucket) StartEmpty(now time.Time) {
	b.raise(int64(now.Sub(b.epoch)) + int64(b.lim.Burst)*int64(b.lim.Interval))
}

func (b *Bucket) raise(tat int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tat = max(b.tat, tat)
}

// Charge counts n units admitted elsewhere at now (by the levee that
// handed over), even past the burst, as LocalStore.Charge does; n ≤ 0
// does nothing.
func (b *Bucket) Charge(now time.Time, n int) {
	if n <= 0 {
		return
	}
	t := int64(now.Sub(b.epoch))
	cost := int64(min(n, b.lim.Burst*4)) * int64(b.lim.Interval) // bounded: no overflow
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tat = max(b.tat, t) + cost
}

// Taken is how many units Take has admitted since the bucket was made:
// what a levee that handed over reports, by difference, to be charged.
func (b *Bucket) Taken() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.taken
}
