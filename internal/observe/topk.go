package observe

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// TopK finds the heaviest keys of a weighted stream in fixed memory: the
// Space-Saving algorithm (Metwally, Agrawal, El Abbadi 2005) over K slots,
// kept in two alternating windows so that old traffic fades.
//
// Guarantee, per window: every key whose true weight exceeds N/K (N: the
// total weight added in the window) holds a slot, and a tracked key's
// Count overestimates its true weight by Err ≤ N/K, never underestimates
// it. Top reports the current window merged with the previous one, so
// counts cover the last one to two windows and their error is at most
// (N_previous + N_current)/K. A window with no more distinct keys than K
// counts exactly.
//
// Windows rotate on the time passed to Add and Top: at each window
// boundary the current window becomes the previous one and a new one
// starts; after two idle windows nothing is left.
//
// Add costs a map lookup and a sift in a K-element heap under one mutex,
// and allocates nothing for a key that holds a slot; a new key taking a
// slot is copied (strings.Clone), so callers may pass views into buffers
// they reuse. Keys longer than MaxKeyLen are cut to it. A nil *TopK
// ignores Add and reports nothing. Safe for concurrent use.
type TopK struct {
	mu     sync.Mutex
	k      int
	window time.Duration
	start  time.Time // of cur; zero until the first call
	cur    spaceSaving
	prev   spaceSaving
}

// MaxKeyLen is the longest key TopK keeps; longer keys count under their
// first MaxKeyLen bytes.
const MaxKeyLen = 128

// NewTopK returns a TopK of k slots (k ≥ 1) per window of the given length.
func NewTopK(k int, window time.Duration) *TopK {
	if k < 1 || window <= 0 {
		panic("observe: NewTopK needs k ≥ 1 and a positive window")
	}
	return &TopK{k: k, window: window, cur: newSpaceSaving(k), prev: newSpaceSaving(k)}
}

// K returns the number of slots (0 for nil).
func (t *TopK) K() int {
	if t == nil {
		return 0
	}
	return t.k
}

// Add counts weight w for key at now.
func (t *TopK) Add(key string, w uint64, now time.Time) {
	if t == nil || w == 0 {
		return
	}
	t.mu.Lock()
	t.addLocked(key, w, now)
	t.mu.Unlock()
}

// addLocked counts w for key (cut to MaxKeyLen) at now and returns the key
// as counted. The caller holds t.mu.
func (t *TopK) addLocked(key string, w uint64, now time.Time) string {
	if len(key) > MaxKeyLen {
		key = key[:MaxKeyLen]
	}
	t.rotate(now)
	t.cur.add(key, w)
	return key
}

// AddHeavy counts weight w for key at now, like Add, and reports whether
// key is heavy: its weight over the current and previous windows, at its
// lower bound (Count−Err), is above the mean weight of the keys tracked.
// The mean is taken over the tracked keys, so with more than K keys active
// a key is heavy when it carries more than 1/K of the weight, and a key
// alone is never heavy (its weight is the whole).
func (t *TopK) AddHeavy(key string, w uint64, now time.Time) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	key = t.addLocked(key, w, now)
	own := t.cur.lower(key) + t.prev.lower(key)
	keys := uint64(max(len(t.cur.slots), len(t.prev.slots)))
	return own*keys > t.cur.total+t.prev.total
}

// TopEntry is one heavy key: Count is an upper bound of its weight over
// the reported windows, Count−Err a lower bound.
type TopEntry struct {
	Key   string `json:"client"`
	Count uint64 `json:"count"`
	Err   uint64 `json:"error"`
}

// Top returns at most K entries, heaviest first (ties by key), over the
// current and previous windows at now. It allocates the result.
func (t *TopK) Top(now time.Time) []TopEntry {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	t.rotate(now)
	out := merge(&t.cur, &t.prev)
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b TopEntry) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(len(out), t.k)]
}

// rotate moves the windows on to the one that contains now. The caller
// holds t.mu.
func (t *TopK) rotate(now time.Time) {
	if t.start.IsZero() {
		t.start = now
		return
	}
	elapsed := now.Sub(t.start)
	if elapsed < t.window {
		return
	}
	if elapsed < 2*t.window {
		t.cur, t.prev = t.prev, t.cur
	} else {
		t.prev.reset()
	}
	t.cur.reset()
	t.start = t.start.Add(elapsed - elapsed%t.window)
}

// merge unions two summaries. A key missing from a full summary may have
// had up to its minimum there, which is added to keep Count an upper bound.
func merge(a, b *spaceSaving) []TopEntry {
	out := make([]TopEntry, 0, len(a.slots)+len(b.slots))
	aMin, bMin := a.floor(), b.floor()
	for _, s := range a.slots {
		e := TopEntry{Key: s.key, Count: s.count + bMin, Err: s.err + bMin}
		if i, ok := b.index[s.key]; ok {
			o := b.slots[i]
			e.Count, e.Err = s.count+o.count, s.err+o.err
		}
		out = append(out, e)
	}
	for _, s := range b.slots {
		if _, ok := a.index[s.key]; !ok {
			out = append(out, TopEntry{Key: s.key, Count: s.count + aMin, Err: s.err + aMin})
		}
	}
	return out
}

// spaceSaving is one window's Space-Saving summary: up to k slots, a
// min-heap of slot numbers by count, and an index from key to slot. A
// tracked key keeps its slot, so heap moves never touch the index.
type spaceSaving struct {
	k     int
	slots []slot  // by slot number
	heap  []int32 // slot numbers, the least count first
	index map[string]int32
	total uint64 // the weight added in the window
}

type slot struct {
	key        string
	count, err uint64
	pos        int32 // in heap
}

func newSpaceSaving(k int) spaceSaving {
	return spaceSaving{k: k, slots: make([]slot, 0, k), heap: make([]int32, 0, k), index: make(map[string]int32, k)}
}

func (s *spaceSaving) reset() {
	clear(s.slots) // drop the keys for the collector
	s.slots, s.heap = s.slots[:0], s.heap[:0]
	clear(s.index)
	s.total = 0
}

// lower is key's weight at its lower bound: 0 when it holds no slot.
func (s *spaceSaving) lower(key string) uint64 {
	if i, ok := s.index[key]; ok {
		return s.slots[i].count - s.slots[i].err
	}
	return 0
}

// floor is what a key without a slot may have weighed: the minimum count
// once every slot is taken, else 0.
func (s *spaceSaving) floor() uint64 {
	if len(s.slots) < s.k {
		return 0
	}
	return s.slots[s.heap[0]].count
}

func (s *spaceSaving) add(key string, w uint64) {
	s.total += w
	if i, ok := s.index[key]; ok {
		s.slots[i].count += w
		s.down(int(s.slots[i].pos))
		return
	}
	owned := strings.Clone(key) // key may be a view into the caller's buffer
	if n := int32(len(s.slots)); n < int32(s.k) {
		s.slots = append(s.slots, slot{key: owned, count: w, pos: n})
		s.heap = append(s.heap, n)
		s.index[owned] = n
		s.up(int(n))
		return
	}
	// Evict the minimum: the newcomer inherits its count as possible error.
	id := s.heap[0]
	m := &s.slots[id]
	delete(s.index, m.key)
	m.key, m.err, m.count = owned, m.count, m.count+w
	s.index[owned] = id
	s.down(0)
}

func (s *spaceSaving) less(i, j int) bool {
	return s.slots[s.heap[i]].count < s.slots[s.heap[j]].count
}

func (s *spaceSaving) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	s.slots[h[i]].pos, s.slots[h[j]].pos = int32(i), int32(j)
}

func (s *spaceSaving) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *spaceSaving) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && s.less(r, c) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// ClientTop is one app's heavy hitters by client key: requests, and
// requests refused by a limit. A nil *ClientTop (top_k: 0) records
// nothing. Safe for concurrent use.
type ClientTop struct {
	requests, rejected *TopK
}

// ClientWindow is the length of one ClientTop window: counts cover the
// last one to two of them.
const ClientWindow = time.Minute

// NewClientTop returns a ClientTop keeping k clients per dimension, or
// nil when k is 0.
func NewClientTop(k int) *ClientTop {
	if k <= 0 {
		return nil
	}
	return &ClientTop{requests: NewTopK(k, ClientWindow), rejected: NewTopK(k, ClientWindow)}
}

// K returns the number of clients kept per dimension (0 for nil).
func (c *ClientTop) K() int {
	if c == nil {
		return 0
	}
	return c.requests.K()
}

// Observe counts one request from client at now, and a rejection if it
// was refused by a limit.
func (c *ClientTop) Observe(client string, rejected bool, now time.Time) {
	if c == nil {
		return
	}
	c.requests.Add(client, 1, now)
	if rejected {
		c.rejected.Add(client, 1, now)
	}
}

// TopClients is the heaviest clients of an app at scrape time.
type TopClients struct {
	Requests []TopEntry `json:"requests"`
	Rejected []TopEntry `json:"rejected"`
}

// Top returns the heaviest clients at now (nil for a nil c).
func (c *ClientTop) Top(now time.Time) *TopClients {
	if c == nil {
		return nil
	}
	return &TopClients{Requests: c.requests.Top(now), Rejected: c.rejected.Top(now)}
}
