package trace

import (
	"strings"
	"testing"
	"time"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		in    string
		ok    bool
		flags byte
	}{
		{validTP, true, 1},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, 0},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", true, 9},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, 0}, // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, 0}, // zero parent id
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, 0}, // uppercase
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false, 0},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", false, 0}, // 00 is exactly 55
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", false, 0},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0}, // ff is invalid
		{"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true, 1},      // later version: sampled bit only
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", true, 1}, // later version, more fields
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01what", false, 0}, // not followed by '-'
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false, 0},        // too short
		{" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0},    // not trimmed
		{"", false, 0},
	} {
		sc, ok := ParseTraceparent(tc.in)
		if ok != tc.ok || ok && sc.Flags != tc.flags {
			t.Errorf("%q: ok %v flags %x, want %v %x", tc.in, ok, sc.Flags, tc.ok, tc.flags)
		}
		if sc2, ok2 := ParseTraceparent([]byte(tc.in)); ok2 != ok || sc2 != sc {
			t.Errorf("%q: the []byte form disagrees", tc.in)
		}
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	sc, ok := ParseTraceparent(validTP)
	if !ok {
		t.Fatal("not parsed")
	}
	if got := string(AppendTraceparent(nil, sc)); got != validTP {
		t.Fatalf("got %s", got)
	}
}

func TestTracestate(t *testing.T) {
	long := "a=" + strings.Repeat("x", 257)
	var many []string
	for i := range 33 {
		many = append(many, "k"+strings.Repeat("a", i%3)+string(rune('a'+i%26))+"="+"v")
	}
	for _, tc := range []struct {
		fields []string
		ok     bool
	}{
		{[]string{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}, true},
		{[]string{"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"}, true},
		{[]string{"a=1 , ,\tb=2"}, true},
		{[]string{"tenant@sys=1"}, true},
		{[]string{"1tenant@sys=1"}, true},
		{[]string{"1abc=1"}, false}, // a simple key starts lcalpha
		{[]string{"Rojo=1"}, false},
		{[]string{"rojo"}, false},
		{[]string{"rojo="}, false},
		{[]string{"rojo=a=b"}, false},
		{[]string{"a@b@c=1"}, false},
		{[]string{"t@toolongsystemid=1"}, false},
		{[]string{long}, false},
		{[]string{"a=" + strings.Repeat("x", 256)}, true},
		{many, false}, // 33 members
		{many[:32], true},
		{[]string{strings.Repeat("a", 250) + "=1", strings.Repeat("b", 250) + "=1", "c=1"}, true},
		{[]string{strings.Repeat("a", 254) + "=1", strings.Repeat("b", 254) + "=1", "c=1"}, false}, // 513 chars
		{[]string{"a=\x01"}, false},
	} {
		var c TracestateCheck
		for _, f := range tc.fields {
			c.AddString(f)
		}
		if c.OK() != tc.ok {
			t.Errorf("%q: ok %v, want %v", tc.fields, c.OK(), tc.ok)
		}
	}
	var none TracestateCheck
	if none.OK() {
		t.Error("no tracestate is not OK")
	}
}

func TestSampler(t *testing.T) {
	parentOn, _ := ParseTraceparent(validTP)
	parentOff := parentOn
	parentOff.Flags = 0
	never, always, half := NewSampler(0), NewSampler(1), NewSampler(0.5)
	id := IDs{}.TraceID()
	for _, s := range []Sampler{never, always, half} {
		if !s.Sample(id, parentOn, true) || s.Sample(id, parentOff, true) {
			t.Error("the parent's flag decides")
		}
	}
	var low, high TraceID
	high[8] = 0xff
	low[15] = 1
	if never.Sample(low, SpanContext{}, false) || !always.Sample(high, SpanContext{}, false) ||
		!half.Sample(low, SpanContext{}, false) || half.Sample(high, SpanContext{}, false) {
		t.Error("a root is sampled by its trace id against the ratio")
	}
	n := 0
	g := IDs{}
	for range 10000 {
		if NewSampler(0.1).Sample(g.TraceID(), SpanContext{}, false) {
			n++
		}
	}
	if n < 800 || n > 1200 {
		t.Errorf("ratio 0.1 sampled %d of 10000", n)
	}
}

func TestRefusalLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewRefusalLimiter(10)
	n := 0
	for range 1000 { // a flood at one instant: the burst
		if l.AllowAt(now) {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("burst allowed %d, want 10", n)
	}
	n = 0
	for i := range 10000 { // 10 s of a flood at 1000/s: the rate
		if l.AllowAt(now.Add(time.Duration(i) * time.Millisecond)) {
			n++
		}
	}
	if n < 99 || n > 101 {
		t.Fatalf("10 s at 10/s allowed %d", n)
	}
	var nilLim *RefusalLimiter
	if nilLim.AllowAt(now) || NewRefusalLimiter(0).AllowAt(now) {
		t.Fatal("none allowed at 0/s")
	}
}

func TestRequestPropagation(t *testing.T) {
	clk := fixedClock(time.Unix(10, 0))
	in := Incoming{Traceparent: validTP, Count: 1}
	in.State.AddString("rojo=1")
	var r Request
	r.Begin(NewSampler(0), IDs{}, clk.Now(), &in)
	parent, _ := ParseTraceparent(validTP)
	got, ok := ParseTraceparent(r.Traceparent())
	if !ok || got.TraceID != parent.TraceID || got.SpanID == parent.SpanID || !got.Sampled() || r.DropTracestate() {
		t.Fatalf("kept trace: %s (drop state %v)", r.Traceparent(), r.DropTracestate())
	}
	in.Count = 2 // two traceparents: none valid
	r.Begin(NewSampler(0), IDs{}, clk.Now(), &in)
	got, _ = ParseTraceparent(r.Traceparent())
	if got.TraceID == parent.TraceID || got.Sampled() || !r.DropTracestate() {
		t.Fatalf("new trace: %s (drop state %v)", r.Traceparent(), r.DropTracestate())
	}
	var off Request
	if off.Traceparent() != nil || off.DropTracestate() || off.Export(true, clk.Now(), NewRefusalLimiter(10)) {
		t.Fatal("the zero Request is off")
	}
	off.Mark(StageShape, clk) // no-op, no panic
	var nilReq *Request
	nilReq.Mark(StageShape, clk)
}

func TestRequestEvents(t *testing.T) {
	var r Request
	in := Incoming{}
	start := time.Unix(10, 0)
	r.Begin(NewSampler(1), IDs{}, start, &in)
	r.Mark(StageShape, fixedClock(start.Add(1)))
	r.Mark(StageAdmitted, fixedClock(start.Add(100)))
	r.Waited(50)
	sp := NewSpan()
	defer sp.Free()
	r.Fill(sp, start.Add(200))
	var names []string
	for _, e := range sp.events {
		names = append(names, e.name)
	}
	if strings.Join(names, ",") != "shape,queued,admitted" || sp.events[1].t != start.Add(50).UnixNano() {
		t.Fatalf("events %v", sp.events)
	}
}

// TestUnsampledAllocatesNothing: the request path's part of tracing.
func TestUnsampledAllocatesNothing(t *testing.T) {
	var clk Clock = fixedClock(time.Unix(10, 0))
	lim := NewRefusalLimiter(0)
	unsampled := validTP[:53] + "00"
	allocs := testing.AllocsPerRun(100, func() {
		var r Request
		in := Incoming{Traceparent: unsampled, Count: 1}
		in.State.AddString("rojo=1,congo=2")
		r.Begin(NewSampler(0), IDs{}, clk.Now(), &in)
		for s := range numStages {
			r.Mark(s, clk)
		}
		_ = r.Traceparent()
		r.Export(true, clk.Now(), lim)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs", allocs)
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
