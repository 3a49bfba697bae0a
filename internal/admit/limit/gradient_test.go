package limit

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// feed drives g for d with requests of the given rtt at the given in-flight count, one sample
// per millisecond.
func feed(g *Gradient, start time.Time, d, rtt time.Duration, inflight int) time.Time {
	now := start
	for end := start.Add(d); now.Before(end); now = now.Add(time.Millisecond) {
		g.Observe(now, rtt, inflight, false)
	}
	return now
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Min: 8, Max: 1024}.WithDefaults()
	want := Config{Min: 8, Max: 1024, Initial: 16, Window: 100 * time.Millisecond, MinSamples: 10,
		Smoothing: 0.2, Tolerance: 1, ProbeEvery: 10 * time.Second, ProbeDepth: 0.1}
	if c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	if got := (Config{Min: 600, Max: 1000}).WithDefaults().Initial; got != 1000 {
		t.Errorf("initial with min 600, max 1000 = %d, want min(max, 2·min) = 1000", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		field string
	}{
		{Config{Min: -1}, "min"},
		{Config{Min: 10, Max: 5}, "max"},
		{Config{Min: 8, Max: 100, Initial: 200}, "initial"},
		{Config{Window: -time.Second}, "window"},
		{Config{MinSamples: -1}, "min_samples"},
		{Config{Smoothing: 1.5}, "smoothing"},
		{Config{Tolerance: 0.5}, "tolerance"},
		{Config{Queue: -1}, "queue"},
		{Config{ProbeEvery: -time.Second}, "probe_every"},
		{Config{ProbeDepth: 0.95}, "probe_depth"},
	} {
		_, err := NewGradient(tc.c)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("NewGradient(%+v) = %v, want a *ConfigError for %s", tc.c, err, tc.field)
		}
	}
	if _, err := NewGradient(Config{}); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

// Min and Max hold whatever the latency says: an unboundedly fast backend stops at Max and a
// hopelessly slow one at Min, and the enforced limit (probes included) never leaves [Min, Max].
func TestGradientBounds(t *testing.T) {
	g := newGradientT(t, Config{Min: 8, Max: 64})
	now := t0
	for i := 0; i < 600; i++ { // 60s at 100 windows of 10ms: latency never rises
		now = feed(g, now, 100*time.Millisecond, 10*time.Millisecond, g.Limit())
		if l := g.Limit(); l < 8 || l > 64 {
			t.Fatalf("limit %d outside [8, 64]", l)
		}
	}
	if l := g.Stats().Limit; l != 64 {
		t.Errorf("limit under constant latency = %d, want Max 64", l)
	}
	// A backend of capacity 2 behind a limit of 64: latency proportional to in-flight.
	for i := 0; i < 600; i++ {
		l := g.Limit()
		now = feed(g, now, 100*time.Millisecond, time.Duration(l)*5*time.Millisecond, l)
		if l < 8 || l > 64 {
			t.Fatalf("limit %d outside [8, 64]", l)
		}
	}
	if l := g.Stats().Limit; l != 8 {
		t.Errorf("limit with a backend of capacity 2 = %d, want Min 8", l)
	}
}

// When the caller keeps fewer than limit/2 requests in flight, latency says nothing about the
// backend's capacity and the limit is left alone, even when latency is high.
func TestGradientAppLimited(t *testing.T) {
	g := newGradientT(t, Config{Min: 8, Max: 1024, Initial: 100})
	now := feed(g, t0, time.Second, 10*time.Millisecond, 100)         // baseline 10ms
	now = feed(g, now, 200*time.Millisecond, 10*time.Millisecond, 20) // close the mixed window
	before := g.Stats().Limit
	feed(g, now, 5*time.Second, 50*time.Millisecond, 20)
	if after := g.Stats().Limit; after != before {
		t.Errorf("limit moved from %d to %d while app-limited", before, after)
	}
}

// Dropped samples carry no latency: a stream of fast failures must not lower the baseline.
func TestGradientDropsExcludedFromRTT(t *testing.T) {
	g := newGradientT(t, Config{})
	now := feed(g, t0, time.Second, 10*time.Millisecond, 16)
	for end := now.Add(time.Second); now.Before(end); now = now.Add(time.Millisecond) {
		g.Observe(now, 10*time.Millisecond, 16, false)
		g.Observe(now, time.Microsecond, 16, true)
	}
	if b := g.Stats().Baseline; b < 9*time.Millisecond {
		t.Errorf("baseline %v after fast drops, want about 10ms", b)
	}
}

func TestGradientObserveDoesNotAllocate(t *testing.T) {
	g := newGradientT(t, Config{})
	now := t0
	allocs := testing.AllocsPerRun(100000, func() {
		now = now.Add(50 * time.Microsecond)
		g.Observe(now, 10*time.Millisecond, g.Limit(), false)
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %v times per call", allocs)
	}
}

// BenchmarkGradientObserve measures one sample; one in 2,000 closes a window (100ms of samples
// 50µs apart), which is the realistic mix at 20,000 requests/s.
func BenchmarkGradientObserve(b *testing.B) {
	g := newGradientT(b, Config{})
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(50 * time.Microsecond)
		g.Observe(now, time.Duration(9+i%3)*time.Millisecond, g.Limit(), false)
	}
}

// BenchmarkGradientWindowClose measures the per-window step: every sample closes a window.
func BenchmarkGradientWindowClose(b *testing.B) {
	g := newGradientT(b, Config{MinSamples: 1, Window: time.Nanosecond})
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		g.Observe(now, time.Duration(9+i%3)*time.Millisecond, g.Limit(), false)
	}
}
