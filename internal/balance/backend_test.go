package balance

import (
	"math"
	"testing"
	"time"
)

func TestLatencyEWMA(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBackend(Spec{ID: "a"}, t0)
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	e := math.Exp(-1)
	steps := []struct {
		at      time.Duration // since t0
		o       Outcome
		latency time.Duration
		want    time.Duration // Latency right after
	}{
		{0, OK, ms(10), ms(10)},                      // first sample is the average
		{0, OK, ms(20), ms(15)},                      // second weighs 1/2 (plain mean so far)
		{EWMADecay, OK, ms(15), ms(15*e + 15*(1-e))}, // one τ later: weight 1−e⁻¹
		{EWMADecay, Canceled, ms(500), ms(15)},       // no sample
		{EWMADecay, Failed, ms(1), ms(30)},           // a failure doubles at once
	}
	for k, st := range steps {
		b.inflight.Add(1)
		b.done(st.o, st.latency, t0.Add(st.at))
		if got := b.Latency(t0.Add(st.at)); absDur(got-st.want) > time.Microsecond {
			t.Errorf("step %d: latency %v; want %v", k, got, st.want)
		}
	}
	// Read decay: one τ without samples multiplies by e⁻¹.
	if got, want := b.Latency(t0.Add(2*EWMADecay)), ms(30*e); absDur(got-want) > time.Microsecond {
		t.Errorf("after τ idle: %v; want %v", got, want)
	}
	if b.InFlight() != 0 || b.ConsecutiveFailures() != 1 || b.Failures() != 1 {
		t.Errorf("in flight %d, consecutive %d, failures %d; want 0, 1, 1", b.InFlight(), b.ConsecutiveFailures(), b.Failures())
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

func TestNewSetCarriesState(t *testing.T) {
	now := time.Unix(0, 0)
	old := NewSet([]Spec{{"a", 1}, {"b", 1}}, nil, now)
	old.begin(0)
	old.Done(old.begin(0), OK, 20*time.Millisecond, now)
	old.Done(old.begin(1), OK, 40*time.Millisecond, now)
	next := NewSet([]Spec{{"b", 3}, {"c", 1}}, old, now)
	if next.Backend(0) != old.Backend(1) {
		t.Fatal("b was not carried over")
	}
	if next.Backend(0).Weight() != 3 {
		t.Errorf("b weight %d; want the new 3", next.Backend(0).Weight())
	}
	// c starts at the mean latency of the carried backends (only b: 40ms).
	if got := next.Backend(1).Latency(now); got != 40*time.Millisecond {
		t.Errorf("new backend starts at %v; want 40ms", got)
	}
	// A request picked before the reload ends on the old Set.
	old.Done(0, OK, time.Millisecond, now)
	if old.Backend(0).InFlight() != 0 {
		t.Errorf("a in flight %d; want 0", old.Backend(0).InFlight())
	}
}

func TestWindowShares(t *testing.T) {
	now := time.Unix(0, 0)
	set := NewSet([]Spec{{"a", 1}, {"b", 2}}, nil, now)
	w := NewWindow(time.Minute)
	if _, imb := w.Observe(set, now); imb != 0 {
		t.Fatalf("no traffic: imbalance %v; want 0", imb)
	}
	for range 10 {
		set.Done(set.begin(0), OK, time.Millisecond, now)
	}
	now = now.Add(2 * time.Minute) // the first 10 picks fall out of later windows
	w.Observe(set, now)
	for range 10 {
		set.Done(set.begin(0), OK, time.Millisecond, now)
		set.Done(set.begin(1), OK, time.Millisecond, now)
		set.Done(set.begin(1), OK, time.Millisecond, now)
	}
	shares, imb := w.Observe(set, now.Add(70*time.Second))
	if shares[0].Requests != 10 || shares[1].Requests != 20 || math.Abs(imb-1) > 1e-9 {
		t.Fatalf("shares %+v, imbalance %v; want 10 and 20, 1.0 (weights 1:2)", shares, imb)
	}
	if math.Abs(shares[1].Share-2.0/3) > 1e-9 {
		t.Errorf("b share %v; want 2/3", shares[1].Share)
	}
}

func TestImbalanceIgnoresUnhealthy(t *testing.T) {
	got := Imbalance([]Share{{Weight: 1, Healthy: true, Requests: 150}, {Weight: 1, Healthy: true, Requests: 50}, {Weight: 1, Requests: 900}})
	if got != 1.5 {
		t.Errorf("imbalance %v; want 1.5", got)
	}
}

func TestNewHashValidates(t *testing.T) {
	set := NewSet(specs("a"), nil, time.Unix(0, 0))
	for _, c := range []float64{0.5, -1, math.NaN(), math.Inf(1)} {
		if _, err := NewHash(set, c); err == nil {
			t.Errorf("NewHash(c=%v) accepted", c)
		}
	}
}

// The key → backend mapping is part of levee's contract across instances
// and versions: changing the hash moves every sticky session.
var goldenMapping = [6]int{1, 1, 2, 0, 1, 0}

func TestHashMappingIsStable(t *testing.T) {
	now := time.Unix(0, 0)
	h, _ := NewHash(NewSet(specs("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"), nil, now), 0)
	got := [6]int{}
	for i, k := range []string{"", "a", "user-1", "user-2", "10.1.2.3", "session=xyz"} {
		got[i] = h.Lookup(k, now)
	}
	t.Logf("mapping %v", got)
	if want := goldenMapping; got != want {
		t.Errorf("mapping %v; want %v", got, want)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	now := time.Unix(0, 0)
	set := NewSet(specs(names("10.0.0.", 10)...), nil, now)
	p := NewP2C(set, nil)
	h, _ := NewHash(set, 0)
	q := NewRoundRobinSet(set)
	for name, b := range map[string]Balancer{"p2c": p, "hash": h, "round_robin": q} {
		if n := testing.AllocsPerRun(1000, func() {
			b.Done(b.Pick("user-42", now), OK, time.Millisecond, now)
		}); n != 0 {
			t.Errorf("%s: %v allocs per Pick+Done; want 0", name, n)
		}
	}
}
