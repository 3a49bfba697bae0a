// Package topk finds the heaviest keys of a weighted stream in fixed memory
// (Space-Saving): Sketch, the summary protect uses to spot an abusive
// client, and ClientTop, the per-app heavy hitters that observe exports and
// the admin API and package admission report. It is its own package so that
// protect and admission need not link observe and Prometheus.
package topk

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Sketch finds the heaviest keys of a weighted stream in fixed memory: the
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
// they reuse. Keys longer than MaxKeyLen are cut to it. A nil *Sketch
// ignores Add and reports nothing. Safe for concurrent use.
type Sketch struct {
	mu sync.Mutex
	k  int
	tier
}

// tier is a pair of alternating Space-Saving windows: the current one,
// and the one before it.
type tier struct {
	window time.Duration
	start  time.Time // of cur; zero until the first call
	cur    spaceSaving
	prev   spaceSaving
}

// MaxKeyLen is the longest key Sketch keeps; longer keys count under their
// first MaxKeyLen bytes.
const MaxKeyLen = 128

// NewSketch returns a Sketch of k slots (k ≥ 1) per window of the given length.
func NewSketch(k int, window time.Duration) *Sketch {
	if k < 1 || window <= 0 {
		panic("topk: NewSketch needs k ≥ 1 and a positive window")
	}
	return &Sketch{k: k, tier: newTier(k, window)}
}

// K returns the number of slots (0 for nil).
func (t *Sketch) K() int {
	if t == nil {
		return 0
	}
	return t.k
}

// Add counts weight w for key at now.
func (t *Sketch) Add(key string, w uint64, now time.Time) {
	if t == nil || w == 0 {
		return
	}
	t.mu.Lock()
	t.addLocked(key, w, now)
	t.mu.Unlock()
}

// addLocked counts w for key (cut to MaxKeyLen) at now and returns the key
// as counted. The caller holds t.mu.
func (t *Sketch) addLocked(key string, w uint64, now time.Time) string {
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
func (t *Sketch) AddHeavy(key string, w uint64, now time.Time) bool {
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

// Entry is one heavy key: Count is an upper bound of its weight over
// the reported windows, Count−Err a lower bound.
type Entry struct {
	Key   string `json:"client"`
	Count uint64 `json:"count"`
	Err   uint64 `json:"error"`
}

// Top returns at most K entries, heaviest first (ties by key), over the
// current and previous windows at now. It allocates the result.
func (t *Sketch) Top(now time.Time) []Entry {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	t.rotate(now)
	out, _ := merge(&t.cur, &t.prev)
	t.mu.Unlock()
	return heaviest(out, t.k)
}

// heaviest sorts entries heaviest first (ties by key) and keeps k.
func heaviest(out []Entry, k int) []Entry {
	slices.SortFunc(out, func(a, b Entry) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(len(out), k)]
}

func newTier(k int, window time.Duration) tier {
	return tier{window: window, cur: newSpaceSaving(k), prev: newSpaceSaving(k)}
}

// due reports whether now is past the current window (or the first call).
func (t *tier) due(now time.Time) bool {
	return t.start.IsZero() || now.Sub(t.start) >= t.window
}

// rotate moves the windows on to the one that contains now. The caller
// holds the lock.
func (t *tier) rotate(now time.Time) {
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

// merge unions summaries. A key missing from a full summary may have had
// up to its minimum there, which is added to keep Count an upper bound;
// floors is the sum of those minimums: the most a key in none of them
// may have weighed.
func merge(ss ...*spaceSaving) (out []Entry, floors uint64) {
	n := 0
	for _, s := range ss {
		n += len(s.slots)
		floors += s.floor()
	}
	out = make([]Entry, 0, n)
	seen := make(map[string]struct{}, n)
	for i, s := range ss {
		for _, sl := range s.slots {
			if _, ok := seen[sl.key]; ok {
				continue
			}
			seen[sl.key] = struct{}{}
			e := Entry{Key: sl.key}
			for j, o := range ss {
				if j < i {
					// An earlier summary had not the key (else it was seen).
					f := o.floor()
					e.Count, e.Err = e.Count+f, e.Err+f
					continue
				}
				if x, ok := o.index[sl.key]; ok {
					e.Count, e.Err = e.Count+o.slots[x].count, e.Err+o.slots[x].err
				} else {
					f := o.floor()
					e.Count, e.Err = e.Count+f, e.Err+f
				}
			}
			out = append(out, e)
		}
	}
	return out, floors
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
	// base is what a key may weigh beyond its count here: the minimums of
	// the full summaries absorbed into this one that lacked it. Every
	// count includes it, so counts stay upper bounds.
	base uint64
}

type slot struct {
	key        string
	count, err uint64
	pos        int32 // in heap
}

// newSpaceSaving returns an empty summary of k slots; its memory grows
// with the keys it sees, up to k, so a quiet app's summaries stay small.
func newSpaceSaving(k int) spaceSaving { return spaceSaving{k: k} }

func (s *spaceSaving) reset() {
	clear(s.slots) // drop the keys for the collector
	s.slots, s.heap = s.slots[:0], s.heap[:0]
	clear(s.index)
	s.total, s.base = 0, 0
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
		return s.base
	}
	return s.slots[s.heap[0]].count
}

func (s *spaceSaving) add(key string, w uint64) { s.addErr(key, w, 0) }

// addErr counts weight w for key, which may already be over by up to e
// (a count carried from a finer summary).
func (s *spaceSaving) addErr(key string, w, e uint64) {
	s.total += w
	if i, ok := s.index[key]; ok {
		s.slots[i].count += w
		s.slots[i].err += e
		s.down(int(s.slots[i].pos))
		return
	}
	if s.index == nil {
		s.index = make(map[string]int32)
	}
	owned := strings.Clone(key) // key may be a view into the caller's buffer
	if n := int32(len(s.slots)); n < int32(s.k) {
		s.slots = append(s.slots, slot{key: owned, count: w + s.base, err: e + s.base, pos: n})
		s.heap = append(s.heap, n)
		s.index[owned] = n
		s.up(int(n))
		return
	}
	// Evict the minimum: the newcomer inherits its count as possible error.
	id := s.heap[0]
	m := &s.slots[id]
	delete(s.index, m.key)
	m.key, m.err, m.count = owned, m.count+e, m.count+w
	s.index[owned] = id
	s.down(0)
}

// clone copies s's slots, heap and counts, without its index (cover's
// copies are only read, by report, which indexes them).
func (s *spaceSaving) clone() *spaceSaving {
	return &spaceSaving{k: s.k, slots: slices.Clone(s.slots), heap: slices.Clone(s.heap), total: s.total, base: s.base}
}

// absorb adds a finer summary's counts (one window of it, now over): a
// key p lacks may have had up to p's floor there, which every count here
// then carries, as keys tracked later do through base.
func (s *spaceSaving) absorb(p *spaceSaving) {
	f := p.floor()
	if f > 0 {
		for i := range s.slots {
			if _, ok := p.index[s.slots[i].key]; !ok {
				s.slots[i].count += f
				s.slots[i].err += f
			}
		}
		for i := len(s.heap)/2 - 1; i >= 0; i-- {
			s.down(i)
		}
	}
	for _, sl := range p.slots {
		s.addErr(sl.key, sl.count, sl.err)
	}
	s.base += f
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

// ClientTop is one app's heavy hitters by client key, in four dimensions
// (requests, requests refused by a limit, body bytes, batch items) and
// three windows (WindowNames). A nil *ClientTop (top_k: 0) records
// nothing. Safe for concurrent use: one lock for every dimension, so a
// request costs one lock and one summary update per dimension it has.
// A dimension's summaries are made on its first count (an app without
// refusals or batch bodies never makes theirs), so a ClientTop that has
// counted nothing is a few words.
type ClientTop struct {
	k  int
	mu sync.Mutex
	by [dimensions]*tiered // nil until the dimension's first count
}

// The dimensions of a ClientTop, as the admin API names them (by=).
const (
	ByRequests = "requests"
	ByRejected = "rejected"
	ByBytes    = "bytes"
	ByItems    = "items"
)

const dimensions = 4

// Dimensions are the names of a ClientTop's dimensions, in order.
var Dimensions = [dimensions]string{ByRequests, ByRejected, ByBytes, ByItems}

// The windows a ClientTop reports, as the admin API names them (window=).
// Each is kept by a tier of two alternating halves, so a report covers
// between half the window and the window (and up to one finer half more,
// not yet handed on); a finer tier's half hands its counts to the next
// coarser tier when it ends.
var (
	WindowNames = [tiers]string{"10s", "1m", "10m"}
	tierHalves  = [tiers]time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
)

const tiers = 3

// tiered is one dimension's summaries: tiers[0] takes every count.
type tiered struct{ tiers [tiers]tier }

func newTiered(k int) *tiered {
	t := new(tiered)
	for i := range t.tiers {
		t.tiers[i] = newTier(k, tierHalves[i])
	}
	return t
}

// rotate moves tier i to now. A half that ends there is first handed to
// the next coarser tier, moved to the time the half ended, so its counts
// land in the coarser window that covers them.
func (t *tiered) rotate(i int, now time.Time) {
	tr := &t.tiers[i]
	if !tr.due(now) {
		return
	}
	if i+1 < tiers && !tr.start.IsZero() && len(tr.cur.slots) > 0 {
		t.rotate(i+1, tr.start.Add(tr.window))
		t.tiers[i+1].cur.absorb(&tr.cur)
	}
	tr.rotate(now)
}

// rotateAll moves every tier to now, for a report.
func (t *tiered) rotateAll(now time.Time) {
	if t == nil {
		return
	}
	for i := range t.tiers {
		t.rotate(i, now)
	}
}

// cover copies the summaries that cover window w (an index of
// WindowNames): tier w's two halves and the current half of each finer
// tier, which has not been handed on yet. The copies are merged with
// report after the lock is let go, so a reader holds the lock the
// request path takes only for a copy of a few slots.
func (t *tiered) cover(w int) []*spaceSaving {
	if t == nil {
		return nil // nothing counted yet
	}
	ss := []*spaceSaving{t.tiers[w].cur.clone(), t.tiers[w].prev.clone()}
	for i := w - 1; i >= 0; i-- {
		ss = append(ss, t.tiers[i].cur.clone())
	}
	return ss
}

// report merges summaries copied by cover.
func report(ss []*spaceSaving) ([]Entry, uint64) {
	for _, s := range ss {
		s.index = make(map[string]int32, len(s.slots))
		for i, sl := range s.slots {
			s.index[sl.key] = int32(i)
		}
	}
	return merge(ss...)
}

// NewClientTop returns a ClientTop keeping k clients per dimension and
// window, or nil when k is 0.
func NewClientTop(k int) *ClientTop {
	if k <= 0 {
		return nil
	}
	return &ClientTop{k: k}
}

// K returns the number of clients kept per dimension (0 for nil).
func (c *ClientTop) K() int {
	if c == nil {
		return 0
	}
	return c.k
}

// Observe counts one request from client at now: a refusal if it was
// refused by a limit, its body bytes and its batch items. It allocates
// nothing for a client already tracked.
func (c *ClientTop) Observe(client string, rejected bool, bytes, items uint64, now time.Time) {
	if c == nil {
		return
	}
	if len(client) > MaxKeyLen {
		client = client[:MaxKeyLen]
	}
	c.mu.Lock()
	for i, w := range [dimensions]uint64{1, b2u(rejected), bytes, items} {
		if w == 0 {
			continue // a measure is moved on when it next counts, or is read
		}
		t := c.by[i]
		if t == nil {
			t = newTiered(c.k)
			c.by[i] = t
		}
		t.rotate(0, now)
		t.tiers[0].cur.add(client, w)
	}
	c.mu.Unlock()
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// The errors of Index: a bad top parameter, named.
var (
	ErrBy     = fmt.Errorf("by must be one of %v", Dimensions)
	ErrWindow = fmt.Errorf("window must be one of %v", WindowNames)
)

// Index returns the indexes of a dimension and a window named as in
// Dimensions and WindowNames, for Report; an error names a bad one.
func Index(by, window string) (d, w int, err error) {
	if d = slices.Index(Dimensions[:], by); d < 0 {
		return 0, 0, ErrBy
	}
	if w = slices.Index(WindowNames[:], window); w < 0 {
		return 0, 0, ErrWindow
	}
	return d, w, nil
}

// Report is the heaviest clients of one dimension over one window.
// A listed client's Count is at most ErrorBound over its true count (its
// own Err says how much, for it); a client not listed counted at most
// ErrorBound, or at most the last listed Count when the list is full.
type Report struct {
	By         string  `json:"by"`
	Window     string  `json:"window"`
	ErrorBound uint64  `json:"error_bound"`
	Clients    []Share `json:"clients"`
}

// Share is one client of a report: Share is Count over the dimension's
// total in the window (an upper bound, as Count is).
type Share struct {
	Client string  `json:"client"`
	Count  uint64  `json:"count"`
	Err    uint64  `json:"error"`
	Share  float64 `json:"share"`
}

// Report returns dimension by (an index of Dimensions) over window w (an
// index of WindowNames) at now, heaviest first, at most n clients (0: K).
// total is the dimension's weight over the window, for the shares; 0
// takes the sum of the counts reported.
func (c *ClientTop) Report(by, w, n int, total uint64, now time.Time) Report {
	r := Report{By: Dimensions[by], Window: WindowNames[w], Clients: []Share{}}
	if c == nil {
		return r
	}
	c.mu.Lock()
	c.by[by].rotateAll(now)
	ss := c.by[by].cover(w)
	c.mu.Unlock()
	out, floors := report(ss)
	if n <= 0 || n > c.k {
		n = c.k
	}
	out = heaviest(out, n)
	r.ErrorBound = floors
	var sum uint64
	for _, e := range out {
		r.ErrorBound = max(r.ErrorBound, e.Err)
		sum += e.Count
	}
	if total == 0 {
		total = sum
	}
	for _, e := range out {
		r.Clients = append(r.Clients, Share{Client: e.Key, Count: e.Count, Err: e.Err,
			Share: float64(e.Count) / float64(max(total, 1))})
	}
	return r
}

// Clients is the heaviest clients of an app at scrape time, over the
// last minute (see WindowNames).
type Clients struct {
	Requests []Entry `json:"requests"`
	Rejected []Entry `json:"rejected"`
}

// Top returns the heaviest clients by requests and by refusals over the
// last minute at now (nil for a nil c).
func (c *ClientTop) Top(now time.Time) *Clients {
	if c == nil {
		return nil
	}
	var covers [2][]*spaceSaving
	c.mu.Lock()
	for i := range covers {
		c.by[i].rotateAll(now)
		covers[i] = c.by[i].cover(1)
	}
	c.mu.Unlock()
	var t Clients
	for i, dst := range []*[]Entry{&t.Requests, &t.Rejected} {
		out, _ := report(covers[i])
		*dst = heaviest(out, c.k)
	}
	return &t
}
