package drill

import (
	"strings"
	"testing"
	"time"
)

// result builds a finished stream with fixed counts over a 1 s window.
func result(ok, non2xx, refusals int64) *Result {
	r := newResult("t", time.Second)
	r.Scheduled, r.Sent, r.OK, r.Non2xx, r.Refusals = ok+non2xx, ok+non2xx, ok, non2xx, refusals
	r.ByStatus[200] = ok
	r.ByStatus[429] = non2xx
	return r
}

func verdicts(cs []Check) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(passFail(c.Pass)[:1])
	}
	return b.String()
}

func TestGradeTenant(t *testing.T) {
	for _, c := range []struct {
		name         string
		flood, other *Result
		want         string // P/F per check: admitted, refusals, other tenant
	}{
		{"limited", result(780, 6720, 6720), result(50, 0, 0), "PPP"},
		{"unlimited", result(7500, 0, 0), result(50, 0, 0), "FPP"},
		{"over by a third", result(1000, 6500, 6500), result(50, 0, 0), "FPP"},
		{"refused without Retry-After", result(750, 6750, 6000), result(50, 0, 0), "PFP"},
		{"neighbour hurt", result(750, 6750, 6750), result(49, 1, 1), "PPF"},
	} {
		if got := verdicts(gradeTenant(c.flood, c.other, 750, 0.2)); got != c.want {
			t.Errorf("%s: %s; want %s", c.name, got, c.want)
		}
	}
	// timeouts count as refusals that were not clear; the generator's own
	// overflow is not the edge's answer
	f := result(750, 6000, 6000)
	f.Overflow = 450
	if got := verdicts(gradeTenant(f, result(50, 0, 0), 750, 0.2)); got != "PPP" {
		t.Errorf("overflow: %s; want PPP", got)
	}
	f.Timeouts = 300
	if got := verdicts(gradeTenant(f, result(50, 0, 0), 750, 0.2)); got != "PFP" {
		t.Errorf("timeouts: %s; want PFP", got)
	}
}

func TestOKRateOverTheSpanTheyArrived(t *testing.T) {
	r := result(100, 0, 0) // 100 OK over a 1 s window
	if r.OKRate() != 100 {
		t.Fatalf("OKRate %v; want 100", r.OKRate())
	}
	r.firstOK = time.Unix(0, 0)
	r.lastOK = r.firstOK.Add(2 * time.Second) // the edge stalled, then caught up
	if r.OKRate() != 50 {
		t.Fatalf("OKRate %v; want 50 over the 2 s the 2xx took to arrive", r.OKRate())
	}
}

func TestGradeDistribution(t *testing.T) {
	for _, c := range []struct {
		counts []int64
		want   string
	}{
		{[]int64{10, 100, 110, 90}, "PP"},   // p2c: the slow one starves
		{[]int64{100, 100, 100, 100}, "PF"}, // round robin: the slow one keeps its share
		{[]int64{10, 200, 50, 50}, "FP"},    // 200/100 = 2
		{[]int64{80, 100, 100, 100}, "PP"},  // exactly 0.8 of the mean
		{[]int64{0, 0, 0, 0}, "FF"},         // nothing arrived
	} {
		if got := verdicts(gradeDistribution(c.counts, 1, 1.5, 0.8)); got != c.want {
			t.Errorf("%v: %s; want %s", c.counts, got, c.want)
		}
	}
}

func TestP99Check(t *testing.T) {
	base, under := newResult("b", time.Second), newResult("u", time.Second)
	for range 100 {
		base.OKLat.Record(10 * time.Millisecond)
	}
	for i := range 100 {
		under.OKLat.Record(time.Duration(i+1) * time.Millisecond) // p99 = 99 ms
	}
	// allowed = max(3 × 10 ms, 10 ms + 100 ms) = 110 ms
	if c := p99Check("x", base, under, 3, 100*time.Millisecond); !c.Pass {
		t.Fatalf("p99 99ms within 110ms: %+v", c)
	}
	// allowed = max(3 × 10 ms, 10 ms + 50 ms) = 60 ms
	if c := p99Check("x", base, under, 3, 50*time.Millisecond); c.Pass {
		t.Fatalf("p99 99ms over 60ms passed: %+v", c)
	}
	if c := p99Check("x", base, newResult("empty", time.Second), 3, time.Second); c.Pass {
		t.Fatal("no successful request under attack passed")
	}
}

func TestGradeBatchAndCold(t *testing.T) {
	o := Options{}.Defaults()
	normal := result(100, 0, 0)
	for range 100 {
		normal.OKLat.Record(time.Millisecond)
	}
	batches := newResult("batches", time.Second)
	batches.Sent, batches.RefusedInBound, batches.ResetsInBound = 10, 7, 3
	if got := verdicts(gradeBatch(normal, normal, batches, normal, o)); got != "PPPP" {
		t.Errorf("refused batches: %s; want PPPP", got)
	}
	batches.RefusedInBound = 6 // one served
	if got := verdicts(gradeBatch(normal, normal, batches, normal, o)); got != "FPPP" {
		t.Errorf("a served batch: %s; want FPPP", got)
	}
	cold := newResult("cold", time.Second)
	cold.Sent, cold.Overflow = 90, 10
	cold.InBound[200], cold.InBound[503] = 50, 40
	if got := verdicts(gradeCold(normal, normal, cold, o)); got != "PPF" {
		t.Errorf("10 cold overflowed: %s; want PPF", got)
	}
	cold.Overflow, cold.InBound[404] = 0, 0
	cold.Sent = 90
	if got := verdicts(gradeCold(normal, normal, cold, o)); got != "PPP" {
		t.Errorf("cold answered: %s; want PPP", got)
	}
}

func TestCardVerdictAndRendering(t *testing.T) {
	pass := &Report{Drill: "a", Verdict: Pass, Checks: []Check{{Name: "c|1", Pass: true, Got: "1", Want: "1"}}}
	skip := &Report{Drill: "b", Verdict: Skipped, Reason: "needs --host"}
	fail := &Report{Drill: "c", Verdict: Fail, Checks: []Check{{Name: "c2", Pass: false}}}
	if v := NewCard("t", time.Time{}, []*Report{pass, skip}).Verdict; v != Pass {
		t.Fatalf("pass+skip = %s", v)
	}
	if v := NewCard("t", time.Time{}, []*Report{pass, fail}).Verdict; v != Fail {
		t.Fatalf("pass+fail = %s", v)
	}
	if v := NewCard("t", time.Time{}, []*Report{skip}).Verdict; v != Skipped {
		t.Fatalf("skip only = %s", v)
	}
	var md, tbl strings.Builder
	c := NewCard("http://edge", time.Time{}, []*Report{pass, skip})
	if err := c.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), `| c\|1 | PASS | 1 | 1 |`) ||
		!strings.Contains(md.String(), "SKIPPED (needs --host)") {
		t.Fatalf("markdown:\n%s", md.String())
	}
	if err := c.WriteTable(&tbl); err != nil || !strings.Contains(tbl.String(), "http://edge: PASS") {
		t.Fatalf("table:\n%s", tbl.String())
	}
}

// overResult is an overload phase over a 1 s window that took elapsed to
// finish: ok 2xx at okLat, quick 503s within its 1 s bound, slow 503s
// after it, and the given timeouts and overflow.
func overResult(ok, quick, slow, timeouts, overflow int64, elapsed, okLat time.Duration) *Result {
	r := newResult("overload", time.Second)
	r.Bound, r.Elapsed = time.Second, elapsed
	r.Sent = ok + quick + slow + timeouts
	r.Scheduled = r.Sent + overflow
	r.OK, r.Non2xx, r.Timeouts, r.Overflow = ok, quick+slow, timeouts, overflow
	r.ByStatus[200], r.ByStatus[503] = ok, quick+slow
	r.InBound[503] = quick
	for range ok {
		r.OKLat.Record(okLat)
	}
	for range quick {
		r.RejLat.Record(time.Millisecond)
	}
	for range slow {
		r.RejLat.Record(1500 * time.Millisecond)
	}
	return r
}

func TestGradeOverload(t *testing.T) {
	o := Options{}.Defaults() // 32 slots x 20 ms = 1600/s; >= 0.8 of it; p99 within max(3x, +100ms)
	base := overResult(400, 0, 0, 0, 0, time.Second, 21*time.Millisecond)
	for _, c := range []struct {
		name  string
		under *Result
		want  string // P/F: goodput, served latency, refused at once
	}{
		{"sheds at once", overResult(1500, 3300, 0, 0, 0, time.Second, 35*time.Millisecond), "PPP"},
		{"exactly 0.8 of capacity", overResult(1280, 3520, 0, 0, 0, time.Second, 35*time.Millisecond), "PPP"},
		// the generator's 512 in flight cap the queue: everything served, late
		{"queues (the generator caps it)", overResult(1550, 0, 0, 0, 3250, time.Second, 320*time.Millisecond), "PFF"},
		// past the clients' timeout: the backend serves requests nobody waits for
		{"collapses", overResult(1200, 0, 0, 3600, 0, 3*time.Second, 1900*time.Millisecond), "FFF"},
		{"sheds too much", overResult(600, 4200, 0, 0, 0, time.Second, 25*time.Millisecond), "FPP"},
		{"refuses slowly", overResult(1500, 2000, 1300, 0, 0, time.Second, 35*time.Millisecond), "PPF"},
		{"1% timed out", overResult(1500, 3267, 0, 33, 0, time.Second, 35*time.Millisecond), "PPP"},
		{"over 1% timed out", overResult(1500, 3266, 0, 34, 0, time.Second, 35*time.Millisecond), "PPF"},
		{"nothing to shed", overResult(1600, 0, 0, 0, 0, time.Second, 35*time.Millisecond), "PPP"},
	} {
		if got := verdicts(gradeOverload(base, c.under, o.capacity(), o)); got != c.want {
			t.Errorf("%s: %s; want %s\n%+v", c.name, got, c.want, gradeOverload(base, c.under, o.capacity(), o))
		}
	}
	// a connection refused or cut at once is shed too; one after the bound is not
	cut := overResult(1500, 0, 0, 0, 0, time.Second, 35*time.Millisecond)
	cut.Sent, cut.Errors, cut.ErrorsInBound = 4800, 3300, 3300
	if got := verdicts(gradeOverload(base, cut, o.capacity(), o)); got != "PPP" {
		t.Errorf("cut at once: %s; want PPP", got)
	}
	cut.ErrorsInBound = 3000
	if got := verdicts(gradeOverload(base, cut, o.capacity(), o)); got != "PPF" {
		t.Errorf("cut late: %s; want PPF", got)
	}
	if got := quickShare(overResult(1500, 3000, 0, 1000, 0, time.Second, time.Millisecond)); got != 0.75 {
		t.Errorf("quickShare = %v; want 3000 of 4000", got)
	}
}
