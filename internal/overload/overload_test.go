package overload

import (
	"math"
	"testing"
	"time"
)

// testConfig is the default config's thresholds as shares and seconds.
func testConfig() Config {
	return Config{
		MinFactor: 0.1, Hysteresis: 0.05, Recovery: 0.1,
		CPU: Band{0.9, 1}, Load: Band{2, 4}, Memory: Band{0.9, 0.98},
		Goroutines: Band{100_000, 1_000_000}, GCPause: Band{0.010, 0.100},
	}
}

func cool() Sample {
	return Sample{CPU: 0.3, Load: 0.5, Memory: 0.4, Goroutines: 100, GCPause: time.Millisecond}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestBandFactor(t *testing.T) {
	b := Band{Start: 0.9, Full: 1}
	for _, tt := range []struct{ v, want float64 }{
		{0, 1}, {0.9, 1}, {math.NaN(), 1}, {0.95, 0.55}, {1, 0.1}, {1.5, 0.1},
	} {
		if got := b.factor(tt.v, 0.1); !near(got, tt.want) {
			t.Errorf("factor(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
	// Start == Full: any value above it is the floor; at it, cool.
	if got := (Band{1, 1}).factor(1, 0.1); got != 1 {
		t.Errorf("a band at 100%% tightened at 100%%: %v", got)
	}
}

// TestEachSignalTightens checks every signal on its own reaches the floor
// at its full mark and leaves the factor alone below its start.
func TestEachSignalTightens(t *testing.T) {
	hot := map[string]func(*Sample){
		"cpu":        func(s *Sample) { s.CPU = 1 },
		"softirq":    func(s *Sample) { s.CPU = 0.99 }, // a softirq storm shows up as busy CPU
		"load":       func(s *Sample) { s.Load = 4 },
		"memory":     func(s *Sample) { s.Memory = 0.99 },
		"goroutines": func(s *Sample) { s.Goroutines = 2_000_000 },
		"gc pause":   func(s *Sample) { s.GCPause = 200 * time.Millisecond },
	}
	for name, heat := range hot {
		m := NewMonitor()
		s := cool()
		if f, _ := m.Observe(testConfig(), s); f != 1 {
			t.Fatalf("%s: cool host gave factor %v", name, f)
		}
		heat(&s)
		f, sig := m.Observe(testConfig(), s)
		if name == "softirq" {
			if !near(f, 0.19) {
				t.Errorf("softirq: factor %v, want 0.19", f)
			}
			continue
		}
		if !near(f, 0.1) || !near(sig.Min(), 0.1) {
			t.Errorf("%s: factor %v (signals %+v), want the floor 0.1", name, f, sig)
		}
	}
}

// TestHysteresis walks one signal up and down and checks the factor in
// force: immediate tightening, a dead band, bounded recovery.
func TestHysteresis(t *testing.T) {
	m := NewMonitor()
	c := testConfig()
	run := func(cpu, want float64) {
		t.Helper()
		s := cool()
		s.CPU = cpu
		if got, sig := m.Observe(c, s); !near(got, want) {
			t.Fatalf("cpu %v: factor %v (signal asks %v), want %v", cpu, got, sig.CPU, want)
		}
	}
	run(0.50, 1)
	run(0.95, 0.55)  // hot: straight down to what the signal asks
	run(0.97, 0.37)  // hotter: down again at once
	run(0.966, 0.37) // asks 0.39: within the hysteresis band, hold
	run(0.95, 0.47)  // asks 0.55: 0.18 above, rise by at most recovery (0.1)
	run(0.95, 0.55)  // and reach it
	run(0.951, 0.54) // asks 0.541: tightening is immediate, in steps of the quantum
	run(0.90, 0.64)  // cool again: back up by recovery per observation
	run(0.90, 0.74)
	run(0.90, 0.84)
	run(0.90, 0.94)
	run(0.90, 1)
}

// TestNoFlapping feeds a signal oscillating around one level: the factor
// must settle instead of following every wiggle.
func TestNoFlapping(t *testing.T) {
	m := NewMonitor()
	c := testConfig()
	changes := 0
	last := 1.0
	for i := range 100 {
		s := cool()
		s.CPU = 0.95 + 0.002*float64(i%2*2-1) // 0.948, 0.952, ...: asks 0.55 ± 0.018, inside the band
		f, _ := m.Observe(c, s)
		if f != last {
			changes++
			last = f
		}
	}
	if changes > 2 {
		t.Errorf("factor changed %d times under a wiggling signal, want at most 2", changes)
	}
}

func TestFloorAndDefaults(t *testing.T) {
	m := NewMonitor()
	c := testConfig()
	c.MinFactor = 0.25
	s := cool()
	s.CPU, s.Load, s.Memory = 1, 100, 1
	if f, _ := m.Observe(c, s); !near(f, 0.25) {
		t.Errorf("factor %v, want the floor 0.25", f)
	}
	m.Reset()
	if m.Factor() != 1 {
		t.Errorf("Reset left %v", m.Factor())
	}
	// Every signal unreadable: cool.
	nan := Sample{CPU: math.NaN(), Load: math.NaN(), Memory: math.NaN()}
	if f, _ := m.Observe(c, nan); f != 1 {
		t.Errorf("unreadable host gave %v, want 1", f)
	}
}
