package config

import "testing"

func TestParseInstanceAndOverload(t *testing.T) {
	cfg, err := Parse([]byte(`
instance: {lock: /run/levee/edge.lock, unexpected: strict, strict_fraction: 25%}
overload:
  enabled: true
  interval: 500ms
  min_factor: 20%
  cpu: {start: 80%, full: 95%}
  load: {start: 1.5, full: 3}
  gc_pause: {start: 5ms, full: 50ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Instance{Lock: "/run/levee/edge.lock", Unexpected: UnexpectedStrict, StrictFraction: 25}); cfg.Instance != want {
		t.Errorf("instance = %+v, want %+v", cfg.Instance, want)
	}
	want := DefaultOverload()
	want.Enabled, want.Interval, want.MinFactor = true, Duration(500e6), 20
	want.CPU = PercentBand{Start: 80, Full: 95}
	want.Load = LoadBand{Start: 1.5, Full: 3}
	want.GCPause = DurationBand{Start: Duration(5e6), Full: Duration(50e6)}
	if cfg.Overload != want {
		t.Errorf("overload = %+v\nwant %+v", cfg.Overload, want)
	}
}

func TestInstanceAndOverloadRules(t *testing.T) {
	tests := []struct{ name, src, path, frag string }{
		{"relative lock", "instance: {lock: levee.lock}", "instance.lock", "absolute path"},
		{"unknown unexpected", "instance: {unexpected: ignore}", "instance.unexpected", "refuse or strict"},
		{"zero fraction", "instance: {strict_fraction: 0%}", "instance.strict_fraction", "must be 1..100"},
		{"fraction over 100", "instance: {strict_fraction: 150%}", "instance.strict_fraction", "not a percentage"},
		{"interval too short", "overload: {interval: 1ms}", "overload.interval", "10ms..1m"},
		{"zero min factor", "overload: {min_factor: 0%}", "overload.min_factor", "must be 1..100"},
		{"hysteresis too wide", "overload: {hysteresis: 60%}", "overload.hysteresis", "must be 0..50"},
		{"zero recovery", "overload: {recovery: 0%}", "overload.recovery", "must be 1..100"},
		{"cpu band reversed", "overload: {cpu: {start: 95%, full: 90%}}", "overload.cpu.start", "≤ overload.cpu.full"},
		{"memory band reversed", "overload: {memory: {start: 99%}}", "overload.memory.start", "≤ overload.memory.full"},
		{"zero load", "overload: {load: {start: 0}}", "overload.load.start", "must be > 0"},
		{"load band reversed", "overload: {load: {start: 5}}", "overload.load.full", "≥ overload.load.start"},
		{"goroutines reversed", "overload: {goroutines: {start: 10, full: 5}}", "overload.goroutines.full", "≥ overload.goroutines.start"},
		{"zero gc pause", "overload: {gc_pause: {start: 0s}}", "overload.gc_pause.start", "must be > 0"},
		{"unknown overload key", "overload: {cpus: {start: 50%}}", "overload.cpus", "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, parseErrs(t, tt.src), tt.path, tt.frag)
		})
	}
}
