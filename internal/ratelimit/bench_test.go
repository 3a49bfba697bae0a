package ratelimit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

var benchLimit = Limit{Interval: time.Microsecond, Burst: 1000}

// TestZeroAllocs: a decision on an existing key, through the Store interface too, and
// the header values into a buffer with room allocate nothing.
func TestZeroAllocs(t *testing.T) {
	s := newStore(t, Options{MaxKeys: 1024})
	var st Store = s
	ctx := t.Context()
	p, err := NewPolicy("app", benchLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	now := t0
	s.AllowAt("client-1", benchLimit, now, 1)
	for name, f := range map[string]func(){
		"AllowAt existing": func() { now = now.Add(time.Microsecond); s.AllowAt("client-1", benchLimit, now, 1) },
		"AllowAt rejected": func() { s.AllowAt("client-1", Limit{Interval: time.Hour, Burst: 1}, now, 1) },
		"Store.Allow":      func() { now = now.Add(time.Microsecond); st.Allow(ctx, "client-1", benchLimit, now, 1) },
		"headers": func() {
			d := s.AllowAt("client-1", benchLimit, now, 0)
			buf = p.AppendRateLimit(buf[:0], d)
			buf = AppendRetryAfter(buf[:0], d)
		},
	} {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Errorf("%s: %v allocs per decision, want 0", name, a)
		}
	}
}

func BenchmarkAllowExisting(b *testing.B) {
	s := newStore(b, Options{MaxKeys: 1 << 16})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		s.AllowAt("client-1", benchLimit, now, 1)
	}
}

func BenchmarkAllowRejected(b *testing.B) {
	s := newStore(b, Options{MaxKeys: 1 << 16})
	lim := Limit{Interval: time.Hour, Burst: 1}
	s.AllowAt("client-1", lim, t0, 1)
	b.ReportAllocs()
	for b.Loop() {
		s.AllowAt("client-1", lim, t0, 1)
	}
}

func BenchmarkAllowStoreInterface(b *testing.B) {
	var s Store = newStore(b, Options{MaxKeys: 1 << 16})
	ctx := b.Context()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		s.Allow(ctx, "client-1", benchLimit, now, 1)
	}
}

// BenchmarkAllowParallel: all goroutines over 10,000 existing keys, real time.
func BenchmarkAllowParallel(b *testing.B) {
	s := newStore(b, Options{MaxKeys: 1 << 16})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i)
		s.AllowAt(keys[i], benchLimit, time.Now(), 1)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(7919)
		for pb.Next() {
			i++
			s.AllowAt(keys[i%uint64(len(keys))], benchLimit, time.Now(), 1)
		}
	})
}

// BenchmarkAllowNewKey: every decision inserts a key into a growing table (map growth
// included: the cold case).
func BenchmarkAllowNewKey(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i)
	}
	var s *LocalStore
	i := len(keys)
	b.ReportAllocs()
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			s, i = newStore(b, Options{MaxKeys: 1 << 21}), 0
			b.StartTimer()
		}
		s.AllowAt(keys[i], benchLimit, t0, 1)
		i++
	}
}

// BenchmarkAllowNewKeySteady: every decision inserts a key into a table whose size is
// steady, because an owner sweeps idle keys (the sweep's cost is included).
func BenchmarkAllowNewKeySteady(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i)
	}
	s := newStore(b, Options{MaxKeys: 1 << 16})
	now, i := t0, 0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(benchLimit.Interval) // each key's bucket is full again after T
		s.AllowAt(keys[i%len(keys)], benchLimit, now, 1)
		if i++; i%4096 == 0 {
			s.Sweep(now)
		}
	}
}

// BenchmarkAllowOverflow: new keys against a table full of active keys.
func BenchmarkAllowOverflow(b *testing.B) {
	s := newStore(b, Options{MaxKeys: 1024})
	lim := Limit{Interval: time.Hour, Burst: 1}
	for i := 0; s.Stats().Keys < 1024; i++ {
		s.AllowAt(fmt.Sprint("full-", i), lim, t0, 1)
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.AllowAt(keys[i%len(keys)], lim, t0, 1)
		i++
	}
}

func BenchmarkAppendRateLimit(b *testing.B) {
	p, _ := NewPolicy("app", benchLimit, 0)
	d := Decision{RetryAfter: 1500 * time.Millisecond, Remaining: 12, Reset: 3 * time.Second}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = p.AppendRateLimit(buf[:0], d)
	}
}
