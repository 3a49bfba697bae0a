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
