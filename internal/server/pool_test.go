package server

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// poolRun sends, on levee's fake clock, 5 s of traffic: ten well-behaved
// clients at 10/s each and one abuser at 200/s (20x theirs), each request
// answered before the next. It returns the well-behaved clients' successes
// and requests, the abuser's successes, and the refusals by reason.
func poolRun(t *testing.T, limitsYAML string) (okLight, light, okAbuser int, reasons map[string]int) {
	t.Helper()
	be := newBodyBackend(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
%s`, be.addr(), limitsYAML), clk)
	reasons = map[string]int{}
	send := func(key string) bool {
		r := p.getAs(key)
		if r.StatusCode == http.StatusOK {
			return true
		}
		if r.Header.Get("Retry-After") == "" {
			t.Fatalf("refusal %d %q without Retry-After", r.StatusCode, r.Header.Get("Levee-Reject"))
		}
		reasons[r.Header.Get("Levee-Reject")]++
		return false
	}
	for ms := 0; ms < 5000; ms += 5 {
		if send("abuser") { // every 5 ms
			okAbuser++
		}
		if ms%10 == 0 { // client i at 10·i ms into each 100 ms
			light++
			if send("client-" + strconv.Itoa(ms/10%10)) {
				okLight++
			}
		}
		clk.Advance(5 * time.Millisecond)
	}
	return okLight, light, okAbuser, reasons
}

// TestBackendLimitsShedTheAbuserNotEveryone is the storage-edge outage:
// the pool takes 150/s; one client sends 200/s. With backend_limits the
// ten well-behaved clients keep ≥ 99.9% success and the abuser gets what
// is left; with the same number as a plain app rate (a global safety limit,
// as the back end had) the well-behaved clients are refused alike — which
// shows the test can tell the two apart.
func TestBackendLimitsShedTheAbuserNotEveryone(t *testing.T) {
	const client = "    limits: {client: {key: header:X-Api-Key}}\n"
	okLight, light, okAbuser, reasons := poolRun(t, client+"    backend_limits: {rate: 150/s, burst: 30}\n")
	if float64(okLight) < 0.999*float64(light) {
		t.Fatalf("well-behaved clients: %d of %d succeeded, want ≥ 99.9%% (refusals %v)", okLight, light, reasons)
	}
	if total := okLight + okAbuser; total > 150*5+30 {
		t.Fatalf("%d admitted in 5 s, over the pool's 150/s + 30", total)
	}
	if okAbuser < 40*5 { // (150 − 100)/s left for it, less the reserve it cannot touch
		t.Fatalf("abuser admitted %d, want the pool's spare rate (about 250)", okAbuser)
	}
	if reasons["backend-share"] == 0 || len(reasons) != 1 {
		t.Fatalf("refusals %v, want backend-share only", reasons)
	}
	t.Logf("backend_limits: well-behaved %d/%d, abuser %d/1000, refusals %v", okLight, light, okAbuser, reasons)

	okLight, light, okAbuser, reasons = poolRun(t, "    limits: {rate: 150/s, burst: 30}\n")
	if float64(okLight) >= 0.999*float64(light) {
		t.Fatalf("control (a global rate limit): well-behaved clients %d of %d succeeded; the test cannot tell", okLight, light)
	}
	t.Logf("global rate limit: well-behaved %d/%d, abuser %d/1000, refusals %v", okLight, light, okAbuser, reasons)
}

// TestBackendLimitsInflight: at the pool's inflight limit, the client
// holding its share is refused at once and another client waits for the
// next slot; the pool's state is exported.
func TestBackendLimitsInflight(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits:
      concurrency: 64
      queue: {max_wait: 30s, max_len: 10, target: 1m}
      client: {key: header:X-Api-Key}
    backend_limits: {inflight: 2}
`, be.addr()))
	held := make(chan *http.Response, 2)
	p.asyncGetAs("abuser", held)
	p.asyncGetAs("abuser", held)
	waitFor(t, "the abuser to hold both pool slots", func() bool { return be.inflight.Load() == 2 })
	if got := p.metric("levee_pool_inflight", map[string]string{"app": "a"}); got != 2 {
		t.Fatalf("levee_pool_inflight = %v, want 2", got)
	}
	if got := p.metric("levee_pool_inflight_limit", map[string]string{"app": "a"}); got != 2 {
		t.Fatalf("levee_pool_inflight_limit = %v, want 2", got)
	}
	extra := make(chan *http.Response, 1)
	p.asyncGetAs("abuser", extra)
	if r := <-extra; r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Levee-Reject") != "backend-client-share" ||
		r.Header.Get("Retry-After") == "" {
		t.Fatalf("abuser beyond its share: %d %q; want 503 backend-client-share with Retry-After", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	polite := make(chan *http.Response, 1)
	p.asyncGetAs("polite", polite)
	waitFor(t, "the polite client to wait for a pool slot", func() bool {
		return p.metric("levee_pool_queue_length", map[string]string{"app": "a"}) == 1
	})
	be.open()
	if r := <-polite; r.StatusCode != http.StatusOK {
		t.Fatalf("polite client: %d %q; want 200", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	for range 2 {
		if r := <-held; r.StatusCode != http.StatusOK {
			t.Fatalf("abuser's held request: %d", r.StatusCode)
		}
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "backend-client-share"}); got != 1 {
		t.Fatalf("levee_rejected_total{reason=backend-client-share} = %v; want 1", got)
	}
	waitFor(t, "the pool to empty", func() bool { return p.metric("levee_pool_inflight", map[string]string{"app": "a"}) == 0 })
}
