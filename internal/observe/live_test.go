package observe

import (
	"testing"
	"time"
)

func TestLiveRates(t *testing.T) {
	var l Live
	base := time.Unix(1_800_000_000, 0)
	// Seconds 0..9: 5 requests each; second 10 (the current one, partial):
	// 100, which the rate leaves out.
	for sec := range 10 {
		at := base.Add(time.Duration(sec)*time.Second + 300*time.Millisecond)
		for range 5 {
			l.Request(at)
		}
		l.Rejected("rate", at)
	}
	for range 100 {
		l.Request(base.Add(10*time.Second + time.Millisecond))
	}
	l.Waited(20*time.Millisecond, base.Add(3*time.Second))
	l.Waited(40*time.Millisecond, base.Add(4*time.Second))
	l.Shadowed("body", base.Add(9*time.Second))
	r := l.Rates(base.Add(10*time.Second + 500*time.Millisecond))
	if r.Requests != 5 || r.Rejected["rate"] != 1 || r.Shadowed["body"] != 0.1 {
		t.Fatalf("rates %+v; want 5 requests/s, 1 rate refusal/s, 0.1 shadowed body/s", r)
	}
	if r.Queued != 0.2 || r.QueueWaitMs != 30 || r.QueueMaxMs != 40 {
		t.Fatalf("queue %+v; want 0.2/s, mean 30 ms, max 40 ms", r)
	}
	// 10 s later the window (seconds 10..19) holds only second 10's 100.
	if r := l.Rates(base.Add(20 * time.Second)); r.Requests != 10 || len(r.Rejected) != 0 {
		t.Fatalf("later: %+v; want 10 requests/s (second 10's 100 over 10 s) and no refusals", r)
	}
	// A slot reused 16 s on does not count the old second.
	l.Request(base.Add(26 * time.Second)) // slot of second 10
	if r := l.Rates(base.Add(27 * time.Second)); r.Requests != 0.1 {
		t.Fatalf("after the ring wrapped: %v requests/s; want 0.1", r.Requests)
	}
}

func TestLiveAddAllocatesNothing(t *testing.T) {
	var l Live
	now := time.Unix(1_800_000_000, 0)
	l.Rejected("rate", now)
	if n := testing.AllocsPerRun(1000, func() {
		l.Request(now)
		l.Rejected("rate", now)
		l.Waited(time.Millisecond, now)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}
