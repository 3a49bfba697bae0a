package main

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTotalAndOffsets(t *testing.T) {
	if got := TotalFor(19200, 10*time.Second); got != 192000 {
		t.Fatalf("TotalFor = %d", got)
	}
	if got := TotalFor(3, 500*time.Millisecond); got != 1 {
		t.Fatalf("TotalFor(3/s, 0.5s) = %d, want 1", got)
	}
	if TotalFor(0, time.Second) != 0 || TotalFor(5, 0) != 0 {
		t.Fatal("zero rate or duration must schedule nothing")
	}
	s := NewSchedule(t0, 64000, time.Second)
	if s.Offset(0) != 0 || s.Offset(1) != 15625*time.Nanosecond || s.Offset(64000) != time.Second {
		t.Fatalf("offsets %v %v %v", s.Offset(0), s.Offset(1), s.Offset(64000))
	}
	// intended times never drift: the i-th offset is i/rate, not a sum of rounded steps
	s = NewSchedule(t0, 3, time.Second)
	if s.Offset(1) != 333333333 || s.Offset(2) != 666666667 || s.Offset(3) != time.Second {
		t.Fatalf("offsets %v %v %v", s.Offset(1), s.Offset(2), s.Offset(3))
	}
}

func TestClaimInOrderThenStop(t *testing.T) {
	s := NewSchedule(t0, 1000, 5*time.Millisecond)
	for want := int64(0); want < 5; want++ {
		i, at, ok := s.Claim()
		if !ok || i != want || !at.Equal(t0.Add(time.Duration(want)*time.Millisecond)) {
			t.Fatalf("claim %d: got %d %v %v", want, i, at, ok)
		}
	}
	if _, _, ok := s.Claim(); ok {
		t.Fatal("claimed past Total")
	}
}

func TestDecide(t *testing.T) {
	at := t0.Add(time.Second)
	cases := []struct {
		now  time.Time
		act  Action
		wait time.Duration
	}{
		{t0, Send, time.Second},                   // early: wait for the intended time
		{at, Send, 0},                             // on time
		{at.Add(999 * time.Millisecond), Send, 0}, // late, still within the timeout
		{at.Add(time.Second), Drop, 0},            // deadline reached before sending
		{at.Add(5 * time.Second), Drop, 0},        // long past
	}
	for _, c := range cases {
		act, wait := Decide(at, c.now, time.Second)
		if act != c.act || wait != c.wait {
			t.Errorf("Decide(now=%v) = %v,%v want %v,%v", c.now.Sub(at), act, wait, c.act, c.wait)
		}
	}
}

// fakeClock is a deterministic clock: Sleep advances it.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time        { return c.now }
func (c *fakeClock) Sleep(d time.Duration) { c.now = c.now.Add(d) }

// fakeTarget answers each request after service time, advancing the clock,
// or times out when service exceeds the deadline.
type fakeTarget struct {
	clk      *fakeClock
	service  []time.Duration // per request, cycled
	status   int
	n        int
	deadline []time.Time
	fail     error
	// ignoreDeadline: take the full service time, then report a timeout if
	// the deadline passed meanwhile
	ignoreDeadline bool
}

func (f *fakeTarget) Do(deadline time.Time) (int, bool, error) {
	f.deadline = append(f.deadline, deadline)
	d := f.service[f.n%len(f.service)]
	f.n++
	if f.fail != nil {
		f.clk.Sleep(d)
		return 0, false, f.fail
	}
	if f.ignoreDeadline {
		f.clk.Sleep(d)
		if f.clk.now.After(deadline) {
			return 0, true, errors.New("timeout")
		}
		return f.status, false, nil
	}
	if end := f.clk.now.Add(d); end.After(deadline) {
		f.clk.now = deadline
		return 0, true, errors.New("timeout")
	}
	f.clk.Sleep(d)
	return f.status, false, nil
}

func TestRunOnTime(t *testing.T) {
	// 100/s for 1 s, 2 ms service: every request is sent at its intended time.
	clk := &fakeClock{now: t0}
	s := NewSchedule(t0, 100, time.Second)
	tg := &fakeTarget{clk: clk, service: []time.Duration{2 * time.Millisecond}, status: 200}
	var st Stats
	Run(s, clk, tg, time.Second, &st)
	if st.Sent.Load() != 100 || st.OK.Load() != 100 || st.Late.Load() != 1 /* request 0 is due at start */ {
		t.Fatalf("sent %d ok %d late %d", st.Sent.Load(), st.OK.Load(), st.Late.Load())
	}
	if got := st.OKLat.Quantile(1); got != 2*time.Millisecond {
		t.Fatalf("max latency %v, want 2ms", got)
	}
	if st.SchedLag.Max() != 0 {
		t.Fatalf("sched lag %v with a fake clock", st.SchedLag.Max())
	}
	if !tg.deadline[10].Equal(s.Intended(10).Add(time.Second)) {
		t.Fatalf("deadline %v, want intended + timeout", tg.deadline[10])
	}
}

func TestRunNoCoordinatedOmission(t *testing.T) {
	// One connection, 1000/s (1 ms apart), but one request stalls for 100 ms.
	// A closed-loop tool would record one slow request; here the ~100
	// requests due during the stall wait for the connection and each one's
	// latency counts from its own intended time.
	clk := &fakeClock{now: t0}
	s := NewSchedule(t0, 1000, 300*time.Millisecond)
	service := make([]time.Duration, 300)
	for i := range service {
		service[i] = 100 * time.Microsecond
	}
	service[50] = 100 * time.Millisecond
	tg := &fakeTarget{clk: clk, service: service, status: 200}
	var st Stats
	Run(s, clk, tg, time.Second, &st)
	if st.OK.Load() != 300 {
		t.Fatalf("ok %d", st.OK.Load())
	}
	// request 51 was due at 51 ms, sent at 150 ms: 99 ms + 0.1 ms.
	if got := st.OKLat.Max(); got != 100*time.Millisecond {
		t.Fatalf("max %v, want 100ms", got)
	}
	// about a third of the requests (those due during the stall, and the
	// catch-up) are slower than 10 ms: p90 must show the stall.
	if got := st.OKLat.Quantile(0.90); got < 30*time.Millisecond {
		t.Fatalf("p90 %v hides the stall (coordinated omission)", got)
	}
	if st.Late.Load() < 99 {
		t.Fatalf("late %d, want >= 99 (requests that found the connection busy)", st.Late.Load())
	}
}

func TestRunTimeoutStorm(t *testing.T) {
	// 1000/s for 100 ms on one connection to a target that needs 30 ms per
	// request, timeout 50 ms: after the first request the backlog eats every
	// request's budget, so each later one is sent late and times out at its
	// deadline — the client-side view of an overloaded, unprotected target.
	clk := &fakeClock{now: t0}
	s := NewSchedule(t0, 1000, 100*time.Millisecond)
	tg := &fakeTarget{clk: clk, service: []time.Duration{30 * time.Millisecond}, status: 200}
	var st Stats
	Run(s, clk, tg, 50*time.Millisecond, &st)
	sent, unsent := st.Sent.Load(), st.Unsent.Load()
	if sent+unsent != 100 {
		t.Fatalf("sent %d + unsent %d != 100", sent, unsent)
	}
	if st.OK.Load() != 1 || st.Timeouts.Load() != sent-1 {
		t.Fatalf("ok %d timeouts %d sent %d", st.OK.Load(), st.Timeouts.Load(), sent)
	}
	if st.OKLat.Max() >= 50*time.Millisecond {
		t.Fatalf("a success took %v, past the timeout", st.OKLat.Max())
	}
}

func TestRunDropsUnsendable(t *testing.T) {
	// The only connection is stuck for 200 ms (a target that does not honour
	// the deadline): requests whose whole 50 ms budget passes meanwhile are
	// dropped unsent, the rest are sent late and timed from their intended time.
	clk := &fakeClock{now: t0}
	s := NewSchedule(t0, 1000, 300*time.Millisecond)
	service := make([]time.Duration, 300)
	for i := range service {
		service[i] = 100 * time.Microsecond
	}
	service[0] = 200 * time.Millisecond
	tg := &fakeTarget{clk: clk, service: service, status: 200, ignoreDeadline: true}
	var st Stats
	Run(s, clk, tg, 50*time.Millisecond, &st)
	// request 0 times out (returns at 200 ms); due 1..150 ms are dropped.
	if st.Timeouts.Load() != 1 || st.Unsent.Load() != 150 {
		t.Fatalf("timeouts %d unsent %d", st.Timeouts.Load(), st.Unsent.Load())
	}
	if st.Sent.Load() != 150 || st.OK.Load() != 149 {
		t.Fatalf("sent %d ok %d", st.Sent.Load(), st.OK.Load())
	}
	// request 151 was due at 151 ms and sent at 200 ms
	if got := st.OKLat.Max(); got < 49*time.Millisecond || got >= 50*time.Millisecond {
		t.Fatalf("max latency %v, want ~49.1ms", got)
	}
}

func TestRunRejectionsAndErrors(t *testing.T) {
	clk := &fakeClock{now: t0}
	s := NewSchedule(t0, 100, 100*time.Millisecond)
	tg := &fakeTarget{clk: clk, service: []time.Duration{time.Millisecond}, status: 503}
	var st Stats
	Run(s, clk, tg, time.Second, &st)
	if st.Rejected.Load() != 10 || st.ByStatus[503].Load() != 10 || st.OK.Load() != 0 || st.RejLat.Count() != 10 {
		t.Fatalf("rejected %d by503 %d ok %d", st.Rejected.Load(), st.ByStatus[503].Load(), st.OK.Load())
	}
	sum := summarize(&st, s, 100*time.Millisecond)
	if sum.Completed["503"] != 10 || sum.GoodputRPS != 0 || sum.OfferedRate != 100 {
		t.Fatalf("summary %+v", sum)
	}

	clk = &fakeClock{now: t0}
	s = NewSchedule(t0, 100, 100*time.Millisecond)
	tg = &fakeTarget{clk: clk, service: []time.Duration{time.Millisecond}, fail: errBadResponse}
	st = Stats{}
	Run(s, clk, tg, time.Second, &st)
	if st.Errors.Load() != 10 || st.ErrKinds[errMalformed].Load() != 10 {
		t.Fatalf("errors %d malformed %d", st.Errors.Load(), st.ErrKinds[errMalformed].Load())
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"19200": 19200, "19200/s": 19200, "64k/s": 64000, "600/m": 10, "1.5k": 1500} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "abc", "5/h", "1e12"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q): want an error", in)
		}
	}
}
