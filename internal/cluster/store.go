package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/ratelimit"
)

// Store decides one app's rate limits against the cluster-wide state, with
// local leases (see the package documentation). It has the decision methods
// of ratelimit.LocalStore, so a route uses either. Create it with
// Cluster.Store.
type Store struct {
	c       *Cluster
	prefix  string              // "<prefix>:<app>:"
	name    func(string) string // a key's name in Redis, after the prefix
	maxKeys int
	// fallback decides while degraded, under each limit's fair share.
	fallback *ratelimit.LocalStore

	mu   sync.Mutex
	keys map[string]*entry
	// nextScan: a full table is scanned for idle keys at most once per
	// scanGap, so a flood of new keys cannot make every decision O(keys).
	nextScan time.Time
}

const scanGap = 10 * time.Millisecond

// entry is one key's lease.
type entry struct {
	redisKey string
	lim      ratelimit.Limit // of the held units
	held     int             // units counted in Redis, not yet spent here
	// emptyUntil (µs since the epoch): Redis had no lease for the key until then.
	emptyUntil int64
	tat        int64 // µs: the bucket's TAT as last seen, for Reset
	lastUse    time.Time
	// fetching is non-nil while a take is in flight; closed when it lands.
	fetching chan struct{}
}

var _ ratelimit.Store = (*Store)(nil)

// Store returns the store of app, whose keys are named in Redis by name
// (nil: the key itself), keeping state for at most maxKeys keys locally.
func (c *Cluster) Store(app string, maxKeys int, name func(key string) string) (*Store, error) {
	fb, err := ratelimit.NewLocalStore(ratelimit.Options{MaxKeys: maxKeys})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if name == nil {
		name = func(k string) string { return k }
	}
	s := &Store{c: c, prefix: c.prefix + ":" + app + ":", name: name, maxKeys: maxKeys,
		fallback: fb, keys: map[string]*entry{}}
	c.mu.Lock()
	c.stores = append(c.stores, s)
	c.mu.Unlock()
	return s, nil
}

// Allow implements ratelimit.Store; it never fails for a reachable or
// unreachable Redis (it falls back), only for an invalid lim or n.
func (s *Store) Allow(_ context.Context, key string, lim ratelimit.Limit, now time.Time, n int) (ratelimit.Decision, error) {
	if err := lim.Validate(); err != nil {
		return ratelimit.Decision{RetryAfter: ratelimit.Never}, err
	}
	if n < 0 || n > lim.Burst {
		return ratelimit.Decision{RetryAfter: ratelimit.Never}, fmt.Errorf("%w: %d with burst %d", ratelimit.ErrInvalidN, n, lim.Burst)
	}
	return s.AllowAt(key, lim, now, n), nil
}

// leaseUnits is the slice taken at once for lim: Lease at lim's rate, at
// least 1, at most half the burst (so a bucket can hold a whole slice while
// another instance spends one).
func (s *Store) leaseUnits(lim ratelimit.Limit) int {
	k := int(s.c.lease / lim.Interval)
	return max(1, min(k, lim.Burst/2))
}

// AllowAt decides n units of key at now, as ratelimit.LocalStore.AllowAt
// does, counting them cluster-wide. Remaining is what this instance holds.
func (s *Store) AllowAt(key string, lim ratelimit.Limit, now time.Time, n int) ratelimit.Decision {
	if lim.Validate() != nil || n < 0 || n > lim.Burst {
		return ratelimit.Decision{RetryAfter: ratelimit.Never}
	}
	us := now.UnixMicro()
	s.mu.Lock()
	e := s.keys[key]
	if e == nil {
		if len(s.keys) >= s.maxKeys && !now.Before(s.nextScan) {
			s.nextScan = now.Add(scanGap)
			s.dropIdleLocked(now)
		}
		if len(s.keys) >= s.maxKeys {
			s.mu.Unlock()
			return s.once(key, lim, now, n) // no room for a lease: decide in Redis
		}
		key = strings.Clone(key) // callers may pass a string over a reused buffer
		e = &entry{redisKey: s.prefix + s.name(key), lim: lim}
		s.keys[key] = e
	}
	e.lastUse = now
	// Three rounds at most: a take in flight lands, our own take lands, decide.
	for range 3 {
		if e.held >= max(n, 1) {
			e.held -= n
			d := ratelimit.Decision{Allowed: true, Remaining: e.held, Reset: resetOf(e, us)}
			s.prefetchLocked(e, lim, now)
			s.mu.Unlock()
			return d
		}
		if s.c.Degraded() && (e.fetching != nil || us < e.emptyUntil || !s.c.probe(us)) {
			break // decide under the fair share; this decision does not probe
		}
		if us < e.emptyUntil {
			d := ratelimit.Decision{RetryAfter: time.Duration(e.emptyUntil-us) * time.Microsecond,
				Remaining: e.held, Reset: resetOf(e, us)}
			if n == 0 {
				d.Allowed = true
			}
			s.mu.Unlock()
			return d
		}
		if e.fetching == nil {
			ch := make(chan struct{})
			e.fetching = ch
			s.mu.Unlock()
			s.take(e, lim, now, max(n, s.leaseUnits(lim)), ch)
		} else {
			ch := e.fetching
			s.mu.Unlock()
			s.waitTake(ch)
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return s.degradedAllow(e, key, lim, now, n)
}

// resetOf is the time until key's bucket is full as last seen.
func resetOf(e *entry, us int64) time.Duration {
	return time.Duration(max(e.tat-us, 0)) * time.Microsecond
}

// prefetchLocked takes the next slice in the background when the held one
// runs low, so the next requests do not wait on Redis.
func (s *Store) prefetchLocked(e *entry, lim ratelimit.Limit, now time.Time) {
	k := s.leaseUnits(lim)
	if e.held > k/4 || e.fetching != nil || now.UnixMicro() < e.emptyUntil || s.c.Degraded() {
		return
	}
	ch := make(chan struct{})
	e.fetching = ch
	if !s.c.goBackground(func() { s.take(e, lim, now, k, ch) }) {
		e.fetching = nil
		close(ch)
	}
}

// waitTake waits for a take in flight; the take's own deadline ends the
// wait, the timer only guards against a take that outlives it.
func (s *Store) waitTake(ch chan struct{}) {
	t := time.NewTimer(2 * s.c.timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// take asks Redis for want units of e and records the answer; ch is
// e.fetching, closed when done. A failure degrades the cluster.
func (s *Store) take(e *entry, lim ratelimit.Limit, now time.Time, want int, ch chan struct{}) {
	us := now.UnixMicro()
	batch := s.leaseUnits(lim)
	res, err := call(s.c, func(ctx context.Context) ([]int64, error) {
		return takeScript.Run(ctx, s.c.rdb, []string{e.redisKey}, us, micros(lim.Interval),
			lim.Burst, want, batch).Int64Slice()
	})
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("cluster: take script returned %d values", len(res))
	}
	s.mu.Lock()
	if err == nil {
		// Held units stay good when lim changes (a reload, the overload
		// factor, a strict fraction): Redis counted them already.
		e.lim = lim
		e.held += int(res[0])
		e.tat = us + res[1]
		e.emptyUntil = 0
		if int(res[0]) < want {
			e.emptyUntil = us + max(res[2], 1)
		}
	}
	e.fetching = nil
	s.mu.Unlock()
	// The state before the wake-up: a decision that waited for this take
	// must find the cluster degraded, or it would start a take of its own
	// and wait out a second deadline on a stalled Redis.
	if err != nil {
		s.c.failed(now, err)
	} else {
		s.c.setDegraded(false, nil)
	}
	close(ch)
}

// once decides n units directly in Redis without a lease (the local table
// is full of busy keys), or falls back when Redis fails.
func (s *Store) once(key string, lim ratelimit.Limit, now time.Time, n int) ratelimit.Decision {
	if !s.c.Degraded() || s.c.probe(now.UnixMicro()) {
		us := now.UnixMicro()
		res, err := call(s.c, func(ctx context.Context) ([]int64, error) {
			return takeScript.Run(ctx, s.c.rdb, []string{s.prefix + s.name(key)}, us, micros(lim.Interval),
				lim.Burst, n, n).Int64Slice()
		})
		if err == nil && len(res) == 3 {
			s.c.setDegraded(false, nil)
			if int(res[0]) == n {
				return ratelimit.Decision{Allowed: true, Reset: time.Duration(res[1]) * time.Microsecond}
			}
			return ratelimit.Decision{RetryAfter: time.Duration(max(res[2], 1)) * time.Microsecond,
				Reset: time.Duration(res[1]) * time.Microsecond}
		}
		s.c.failed(now, err)
	}
	return s.fallback.AllowAt(key, share(lim, s.c.Live()), now, n)
}

// degradedAllow decides while Redis is unreachable: units already held are
// spent first (Redis counted them), then this instance's fair share.
func (s *Store) degradedAllow(e *entry, key string, lim ratelimit.Limit, now time.Time, n int) ratelimit.Decision {
	s.mu.Lock()
	if e.held >= max(n, 1) {
		e.held -= n
		d := ratelimit.Decision{Allowed: true, Remaining: e.held}
		s.mu.Unlock()
		return d
	}
	s.mu.Unlock()
	return s.fallback.AllowAt(key, share(lim, s.c.Live()), now, n)
}

// share is one of live instances' fair share of lim.
func share(lim ratelimit.Limit, live int) ratelimit.Limit {
	if live <= 1 {
		return lim
	}
	sh := ratelimit.Limit{Interval: lim.Interval * time.Duration(live), Burst: max(1, lim.Burst/live)}
	if sh.Validate() != nil {
		return lim
	}
	return sh
}

// micros is d in microseconds, with its fraction.
func micros(d time.Duration) string {
	return fmt.Sprintf("%d.%03d", d/time.Microsecond, d%time.Microsecond)
}

// Sweep drops the local state of keys that hold no units and no known empty
// bucket at now, and the fallback's idle keys; it returns how many it dropped.
func (s *Store) Sweep(now time.Time) int {
	s.mu.Lock()
	n := s.dropIdleLocked(now)
	s.mu.Unlock()
	return n + s.fallback.Sweep(now)
}

func (s *Store) dropIdleLocked(now time.Time) int {
	us := now.UnixMicro()
	n := 0
	for k, e := range s.keys {
		// Redis holds the bucket: a local entry that holds no units and
		// knows of no empty bucket is only a cache, dropped freely.
		if e.held == 0 && e.fetching == nil && us >= e.emptyUntil {
			delete(s.keys, k)
			n++
		}
	}
	return n
}

// giveIdle gives back, at now, the units of keys not used since before,
// synchronously.
func (s *Store) giveIdle(now, before time.Time) {
	type give struct {
		key   string
		lim   ratelimit.Limit
		units int
	}
	var gives []give
	s.mu.Lock()
	for _, e := range s.keys {
		if e.held > 0 && e.fetching == nil && e.lastUse.Before(before) {
			gives = append(gives, give{e.redisKey, e.lim, e.held})
			e.held = 0
		}
	}
	s.mu.Unlock()
	for _, g := range gives {
		_, err := call(s.c, func(ctx context.Context) (int64, error) {
			return giveScript.Run(ctx, s.c.rdb, []string{g.key}, now.UnixMicro(), micros(g.lim.Interval), g.units).Int64()
		})
		if err != nil {
			s.c.failed(now, err)
			return // the rest stay counted: a little under the limit, never over
		}
	}
}

// Close stops the Cluster from tending the store (its app is gone); leases
// it holds run out with their keys' idle time in Redis.
func (s *Store) Close() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, st := range c.stores {
		if st == s {
			c.stores = append(c.stores[:i], c.stores[i+1:]...)
			break
		}
	}
}
