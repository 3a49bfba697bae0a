package catalog

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// sieve is a bounded map from a host to a cached entry, split in shards
// that each have their own lock and their own SIEVE eviction (Zhang et
// al., NSDI '24): a hit only sets the node's visited bit, so readers never
// move list nodes and take only their shard's read lock; a new node enters
// unvisited, so a scan of hosts seen once evicts those hosts, not the ones
// in use.
type sieve[E any] struct {
	seed   maphash.Seed
	shards []sieveShard[E]
	// count is the entries of all shards; cap bounds it. A shard inserting
	// into a full cache evicts its own victim, so the bound holds however
	// the hash spreads keys (plus at most one entry per empty shard).
	count atomic.Int64
	cap   int64
}

type sieveShard[E any] struct {
	mu sync.RWMutex
	m  map[string]*sieveNode[E]
	// head is the newest node, tail the oldest; hand walks from tail to head.
	head, tail, hand *sieveNode[E]
	all              *sieve[E]
	// gen counts invalidations, so a load that began before one does not
	// insert what it read (guarded by mu).
	gen  uint64
	hits atomic.Uint64
	_    [64]byte // keep neighbouring shards' locks off one cache line
}

type sieveNode[E any] struct {
	key        string
	val        E
	expires    int64 // Unix nanoseconds; 0: never (used by the unknown-host cache)
	visited    atomic.Bool
	prev, next *sieveNode[E] // prev: towards the tail (older)
}

// newSieve returns a cache of at most about capacity entries in n shards.
func newSieve[E any](capacity, n int) *sieve[E] {
	s := &sieve[E]{seed: maphash.MakeSeed(), shards: make([]sieveShard[E], n), cap: int64(max(capacity, 1))}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*sieveNode[E])
		s.shards[i].all = s
	}
	return s
}

func (s *sieve[E]) shard(key string) *sieveShard[E] {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// get returns key's node (nil if absent) and marks it visited.
func (sh *sieveShard[E]) get(key string) *sieveNode[E] {
	sh.mu.RLock()
	n := sh.m[key]
	sh.mu.RUnlock()
	if n != nil && !n.visited.Load() { // a store only when it changes: no cache-line traffic on hot hosts
		n.visited.Store(true)
	}
	return n
}

// generation reads the shard's invalidation count.
func (sh *sieveShard[E]) generation() uint64 {
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.gen
}

// put inserts key unless the shard was invalidated since gen, replacing an
// existing node. It returns whether it inserted, and the nodes it removed
// (replaced or evicted), which the caller releases outside the lock.
func (sh *sieveShard[E]) put(key string, val E, expires int64, gen uint64) (bool, []*sieveNode[E]) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen {
		return false, nil
	}
	var out []*sieveNode[E]
	if old := sh.m[key]; old != nil {
		sh.unlink(old)
		out = append(out, old)
	}
	for sh.all.count.Load() >= sh.all.cap && len(sh.m) > 0 {
		out = append(out, sh.evict())
	}
	n := &sieveNode[E]{key: key, val: val, expires: expires}
	sh.m[key] = n
	sh.all.count.Add(1)
	n.prev = sh.head
	if sh.head != nil {
		sh.head.next = n
	}
	sh.head = n
	if sh.tail == nil {
		sh.tail = n
	}
	return true, out
}

// evict removes the SIEVE victim: from the hand towards the head, the
// first node not visited since the hand last passed, clearing visited
// bits on the way. Callers hold mu and the shard is not empty.
func (sh *sieveShard[E]) evict() *sieveNode[E] {
	n := sh.hand
	if n == nil {
		n = sh.tail
	}
	for n.visited.Load() {
		n.visited.Store(false)
		if n = n.next; n == nil {
			n = sh.tail
		}
	}
	sh.hand = n.next
	sh.unlink(n)
	return n
}

// remove deletes key and returns its node (nil if absent), bumping the
// generation so loads in flight do not bring it back stale.
func (sh *sieveShard[E]) remove(key string) *sieveNode[E] {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.gen++
	n := sh.m[key]
	if n != nil {
		sh.unlink(n)
	}
	return n
}

// removeIf deletes every node whose key matches, bumping the generation.
func (sh *sieveShard[E]) removeIf(match func(string) bool) []*sieveNode[E] {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.gen++
	var out []*sieveNode[E]
	for k, n := range sh.m {
		if match(k) {
			sh.unlink(n)
			out = append(out, n)
		}
	}
	return out
}

// unlink takes n out of the map and the list. Callers hold mu.
func (sh *sieveShard[E]) unlink(n *sieveNode[E]) {
	delete(sh.m, n.key)
	sh.all.count.Add(-1)
	if sh.hand == n {
		sh.hand = n.next
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		sh.tail = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		sh.head = n.prev
	}
	n.prev, n.next = nil, nil
}

// len counts the entries of every shard.
func (s *sieve[E]) len() int { return int(s.count.Load()) }

// hits sums the shards' hit counters.
func (s *sieve[E]) hits() uint64 {
	var n uint64
	for i := range s.shards {
		n += s.shards[i].hits.Load()
	}
	return n
}
