package topk

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// zipfKeys draws n keys from a Zipf distribution over m keys.
func zipfKeys(seed uint64, n, m int) []string {
	r := rand.New(rand.NewPCG(seed, seed))
	z := rand.NewZipf(r, 1.2, 1, uint64(m-1))
	out := make([]string, n)
	for i := range out {
		out[i] = "client-" + strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}

func exactCounts(keys []string) map[string]uint64 {
	c := map[string]uint64{}
	for _, k := range keys {
		c[k]++
	}
	return c
}

func TestSketchZipfFindsTheHeavyHittersWithinTheBound(t *testing.T) {
	const k, n = 64, 200_000
	for _, seed := range []uint64{1, 2, 3} {
		keys := zipfKeys(seed, n, 100_000)
		tk := NewSketch(k, time.Minute)
		for _, key := range keys {
			tk.Add(key, 1, t0)
		}
		truth := exactCounts(keys)
		top := tk.Top(t0)
		if len(top) > k {
			t.Fatalf("seed %d: %d entries, want ≤ %d", seed, len(top), k)
		}
		got := map[string]Entry{}
		for _, e := range top {
			got[e.Key] = e
			if e.Count < truth[e.Key] || e.Count-truth[e.Key] > n/k || e.Err > n/k {
				t.Errorf("seed %d: %s: count %d err %d, true %d, bound %d", seed, e.Key, e.Count, e.Err, truth[e.Key], n/k)
			}
			if e.Count-e.Err > truth[e.Key] {
				t.Errorf("seed %d: %s: lower bound %d above true %d", seed, e.Key, e.Count-e.Err, truth[e.Key])
			}
		}
		// Every key heavier than N/K is tracked, and the exact top 10 come first in order.
		type kc struct {
			k string
			c uint64
		}
		var exact []kc
		for key, c := range truth {
			exact = append(exact, kc{key, c})
			if c > n/k {
				if _, ok := got[key]; !ok {
					t.Errorf("seed %d: %s (count %d > N/K) not tracked", seed, key, c)
				}
			}
		}
		slices.SortFunc(exact, func(a, b kc) int { return int(b.c) - int(a.c) })
		for i := range 10 {
			if top[i].Key != exact[i].k {
				t.Errorf("seed %d: rank %d is %s (%d), want %s (%d)", seed, i, top[i].Key, top[i].Count, exact[i].k, exact[i].c)
			}
		}
	}
}

func TestSketchExactWithFewKeys(t *testing.T) {
	tk := NewSketch(4, time.Minute)
	for i := range 100 {
		tk.Add("a", 3, t0)
		tk.Add("b", 1, t0)
		if i%2 == 0 {
			tk.Add("c", 1, t0)
		}
	}
	want := []Entry{{"a", 300, 0}, {"b", 100, 0}, {"c", 50, 0}}
	if got := tk.Top(t0); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSketchCapacityNeverExceeded(t *testing.T) {
	tk := NewSketch(8, time.Minute)
	for i := range 10_000 {
		tk.Add(strconv.Itoa(i), uint64(i%7+1), t0.Add(time.Duration(i)*time.Millisecond))
		if n := len(tk.cur.slots); n > 8 || len(tk.cur.index) != n {
			t.Fatalf("after %d adds: %d slots, %d indexed", i, n, len(tk.cur.index))
		}
		for j, s := range tk.cur.slots {
			if int(s.pos) >= len(tk.cur.heap) || tk.cur.heap[s.pos] != int32(j) || tk.cur.index[s.key] != int32(j) {
				t.Fatalf("slot %d (%q): index and heap disagree", j, s.key)
			}
		}
	}
	if got := tk.Top(t0.Add(10 * time.Second)); len(got) != 8 {
		t.Fatalf("%d entries, want 8", len(got))
	}
}

func TestSketchLongKeysAreCut(t *testing.T) {
	tk := NewSketch(2, time.Minute)
	long := strings.Repeat("x", 1000)
	tk.Add(long, 1, t0)
	tk.Add(long+"y", 1, t0)
	got := tk.Top(t0)
	if len(got) != 1 || len(got[0].Key) != MaxKeyLen || got[0].Count != 2 {
		t.Fatalf("got %+v", got)
	}
}

func TestSketchWindowsDecay(t *testing.T) {
	tk := NewSketch(4, time.Minute)
	for range 100 {
		tk.Add("yesterday", 1, t0)
	}
	steps := []struct {
		at        time.Duration
		add       string
		wantFirst string
		wantCount uint64
		wantLen   int
	}{
		{at: 30 * time.Second, wantFirst: "yesterday", wantCount: 100, wantLen: 1},
		{at: 70 * time.Second, add: "today", wantFirst: "yesterday", wantCount: 100, wantLen: 2}, // previous window still shown
		{at: 125 * time.Second, add: "today", wantFirst: "today", wantCount: 2, wantLen: 1},      // "yesterday" two windows old: gone
		{at: 10 * time.Minute, wantLen: 0},                                                       // idle: nothing left
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.add != "" {
			tk.Add(s.add, 1, now)
		}
		got := tk.Top(now)
		if len(got) != s.wantLen {
			t.Fatalf("at %v: %v, want %d entries", s.at, got, s.wantLen)
		}
		if s.wantLen > 0 && (got[0].Key != s.wantFirst || got[0].Count != s.wantCount) {
			t.Fatalf("at %v: first %+v, want %s=%d", s.at, got[0], s.wantFirst, s.wantCount)
		}
	}
}

func TestSketchMergeKeepsAnUpperBound(t *testing.T) {
	tk := NewSketch(2, time.Minute)
	tk.Add("a", 10, t0)
	tk.Add("b", 5, t0)
	tk.Add("c", 1, t0) // evicts b: c = 6 ± 5
	tk.Add("b", 7, t0.Add(61*time.Second))
	got := tk.Top(t0.Add(61 * time.Second))
	// b: 7 now, plus at most the previous window's minimum (6) it may have had there.
	want := []Entry{{"b", 13, 6}, {"a", 10, 0}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSketchAddAllocatesNothingForTrackedKeys(t *testing.T) {
	tk := NewSketch(16, time.Minute)
	buf := []byte("client-1")
	tk.Add(string(buf), 1, t0)
	allocs := testing.AllocsPerRun(1000, func() {
		tk.Add(unsafeString(buf), 1, t0)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Add", allocs)
	}
	// The tracked key is a copy: reusing the caller's buffer does not change it.
	copy(buf, "CLIENT-1")
	if got := tk.Top(t0); got[0].Key != "client-1" {
		t.Fatalf("key changed with the caller's buffer: %q", got[0].Key)
	}
}

func TestNilClientTop(t *testing.T) {
	var c *ClientTop = NewClientTop(0)
	c.Observe("x", true, 1, 1, t0)
	if c.Top(t0) != nil || c.K() != 0 {
		t.Fatal("a nil ClientTop reports something")
	}
}

func BenchmarkSketchAddTracked(b *testing.B) {
	keys := zipfKeys(1, 4096, 32) // fewer keys than slots: every Add hits a slot
	tk := NewSketch(64, time.Minute)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tk.Add(keys[i&4095], 1, t0)
	}
}

func BenchmarkSketchAddZipf(b *testing.B) {
	keys := zipfKeys(1, 1<<16, 1_000_000) // a long tail: some Adds evict
	tk := NewSketch(64, time.Minute)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tk.Add(keys[i&(1<<16-1)], 1, t0)
	}
}

func BenchmarkSketchAddParallel(b *testing.B) {
	keys := zipfKeys(1, 4096, 32)
	tk := NewSketch(64, time.Minute)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tk.Add(keys[i&4095], 1, t0)
			i++
		}
	})
}

func BenchmarkSketchTop(b *testing.B) {
	tk := NewSketch(64, time.Minute)
	for _, k := range zipfKeys(1, 1<<16, 1_000_000) {
		tk.Add(k, 1, t0)
	}
	b.ReportAllocs()
	for b.Loop() {
		tk.Top(t0)
	}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// TestSketchAddHeavyFindsTheAbuserOnly: ten clients at one request per round
// and one at twenty. After the first round the abuser is heavy at every
// request and no other client ever is; a client alone is never heavy.
func TestSketchAddHeavyFindsTheAbuserOnly(t *testing.T) {
	tk := NewSketch(16, time.Second)
	if tk.AddHeavy("alone", 1, t0) || tk.AddHeavy("alone", 1000, t0) {
		t.Fatal("a client alone is heavy")
	}
	tk = NewSketch(16, time.Second)
	now := t0
	for round := range 200 {
		now = now.Add(10 * time.Millisecond) // windows rotate every 100 rounds
		for i := range 10 {
			if tk.AddHeavy("light-"+strconv.Itoa(i), 1, now) && round > 0 {
				t.Fatalf("round %d: light client %d is heavy", round, i)
			}
		}
		for j := range 20 {
			if heavy := tk.AddHeavy("abuser", 1, now); !heavy && round > 0 {
				t.Fatalf("round %d, request %d: the abuser is not heavy", round, j)
			}
		}
	}
}

// TestSketchAddHeavyAboveOneKth: with more keys than slots, a key is heavy
// when it carries more than 1/K of the weight, whatever the others do.
func TestSketchAddHeavyAboveOneKth(t *testing.T) {
	const k = 4
	tk := NewSketch(k, time.Minute)
	for i := range 1000 {
		tk.AddHeavy("many-"+strconv.Itoa(i), 1, t0) // 1000 keys of weight 1
	}
	// 1000 spread over 4 slots: the mean a key must beat is total/K.
	var heavyAt int
	for n := 1; n <= 1000; n++ {
		if tk.AddHeavy("big", 1, t0) {
			heavyAt = n
			break
		}
	}
	// big's lower bound is n − err(≤ floor); heavy once n·K > 1000 + n, near n = 334.
	if heavyAt < 300 || heavyAt > 700 {
		t.Fatalf("big became heavy after %d requests, want about total/K", heavyAt)
	}
}

// TestSketchAddHeavyForgets: a client heavy two windows ago is light now.
func TestSketchAddHeavyForgets(t *testing.T) {
	tk := NewSketch(16, time.Second)
	for range 100 {
		tk.AddHeavy("was-heavy", 1, t0)
		tk.AddHeavy("other", 1, t0)
	}
	for range 100 {
		tk.AddHeavy("was-heavy", 1, t0)
	}
	if !tk.AddHeavy("was-heavy", 1, t0) {
		t.Fatal("was-heavy is not heavy at 2:1")
	}
	later := t0.Add(2500 * time.Millisecond)
	tk.AddHeavy("other", 5, later)
	if tk.AddHeavy("was-heavy", 1, later) {
		t.Fatal("was-heavy still heavy two windows later")
	}
}

func TestClientTopWindows(t *testing.T) {
	c := NewClientTop(8)
	// One request a second for 3 minutes from "steady"; "burst" sends 50
	// in the last 5 s, with 1000 bytes and 20 items each.
	for sec := range 180 {
		c.Observe("steady", false, 10, 0, t0.Add(time.Duration(sec)*time.Second))
	}
	for i := range 50 {
		c.Observe("burst", true, 1000, 20, t0.Add(175*time.Second+time.Duration(i)*100*time.Millisecond))
	}
	now := t0.Add(180 * time.Second)
	get := func(by, w int) map[string]uint64 {
		r := c.Report(by, w, 0, 0, now)
		if r.ErrorBound != 0 {
			t.Fatalf("%s/%s: error bound %d with fewer clients than slots; want exact", r.By, r.Window, r.ErrorBound)
		}
		m := map[string]uint64{}
		for _, e := range r.Clients {
			m[e.Client] = e.Count
		}
		return m
	}
	// 10s covers 5 to 10 s (plus the current half).
	if m := get(0, 0); m["burst"] != 50 || m["steady"] < 5 || m["steady"] > 10 {
		t.Fatalf("10s requests: %v; want burst 50, steady 5..10", m)
	}
	if m := get(0, 1); m["steady"] < 30 || m["steady"] > 65 {
		t.Fatalf("1m requests: %v; want steady 30..65", m)
	}
	// 10m covers everything since the start: the cascade lost nothing.
	if m := get(0, 2); m["steady"] != 180 || m["burst"] != 50 {
		t.Fatalf("10m requests: %v; want steady 180, burst 50", m)
	}
	if m := get(1, 2); m["burst"] != 50 || m["steady"] != 0 {
		t.Fatalf("10m rejected: %v; want burst 50 only", m)
	}
	if m := get(2, 2); m["burst"] != 50_000 || m["steady"] != 1800 {
		t.Fatalf("10m bytes: %v; want burst 50000, steady 1800", m)
	}
	if r := c.Report(3, 0, 0, 0, now); len(r.Clients) != 1 || r.Clients[0].Client != "burst" ||
		r.Clients[0].Count != 1000 || r.Clients[0].Share != 1 {
		t.Fatalf("10s items: %+v; want burst alone with 1000", r)
	}
	// Twenty idle minutes later nothing is left in any window.
	for w := range WindowNames {
		if r := c.Report(0, w, 0, 0, now.Add(20*time.Minute)); len(r.Clients) != 0 {
			t.Fatalf("window %s after 20 idle minutes: %+v", r.Window, r.Clients)
		}
	}
}

// TestClientTopBoundHolds: with many more clients than slots, over a span
// the 10m window covers whole, every listed count is an upper bound of the
// client's true count within its stated error, every client left out
// weighs no more than the bound says, and the heaviest is first.
func TestClientTopBoundHolds(t *testing.T) {
	c := NewClientTop(16)
	keys := zipfKeys(7, 1<<15, 2000)
	truth := map[string]uint64{}
	for i, k := range keys {
		at := t0.Add(time.Duration(i) * 4 * time.Millisecond) // ~131 s in all
		c.Observe(k, false, 0, 0, at)
		truth[k]++
	}
	now := t0.Add(time.Duration(len(keys)) * 4 * time.Millisecond)
	r := c.Report(0, 2, 0, uint64(len(keys)), now)
	if len(r.Clients) != 16 {
		t.Fatalf("%d clients listed; want 16", len(r.Clients))
	}
	listed := map[string]bool{}
	for _, e := range r.Clients {
		listed[e.Client] = true
		if e.Count < truth[e.Client] || e.Count-e.Err > truth[e.Client] || e.Err > r.ErrorBound {
			t.Fatalf("%s: count %d err %d (bound %d); true %d", e.Client, e.Count, e.Err, r.ErrorBound, truth[e.Client])
		}
	}
	last := r.Clients[len(r.Clients)-1].Count
	heaviest, most := "", uint64(0)
	for k, n := range truth {
		if n > most {
			heaviest, most = k, n
		}
		if !listed[k] && n > max(r.ErrorBound, last) {
			t.Fatalf("%s (true %d) left out, over the bound %d and the last listed %d", k, n, r.ErrorBound, last)
		}
	}
	if r.Clients[0].Client != heaviest {
		t.Fatalf("first listed %s; the heaviest is %s (%d)", r.Clients[0].Client, heaviest, most)
	}
}

func TestClientTopObserveAllocatesNothingForTrackedClients(t *testing.T) {
	c := NewClientTop(16)
	buf := []byte("client-1")
	c.Observe(string(buf), true, 100, 3, t0)
	if n := testing.AllocsPerRun(1000, func() {
		c.Observe(unsafeString(buf), true, 100, 3, t0)
	}); n != 0 {
		t.Fatalf("%v allocations per Observe", n)
	}
}
