package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// End to end: real levee, real loopback backends that count what they get.
func TestDistributionIsEvenEndToEnd(t *testing.T) {
	// Round robin is exact. p2c follows load, and real loopback timing on a
	// busy machine skews it, so its bound here is loose (the simulated gate
	// in internal/balance holds it to 1.10): enough to catch a policy that
	// starves or floods a backend, without depending on the scheduler.
	bounds := map[string]float64{"round_robin": 1.10, "p2c": 1.5}
	for _, policy := range []string{"p2c", "round_robin"} {
		t.Run(policy, func(t *testing.T) {
			const backends, clients, perClient = 4, 8, 250
			counts := make([]atomic.Int64, backends)
			var addrs []string
			for i := range backends {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					counts[i].Add(1)
					io.WriteString(w, "ok")
				}))
				t.Cleanup(srv.Close)
				addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
			}
			p := startProxy(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    balance: %s\n",
				strings.Join(addrs, ", "), policy))
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for range perClient {
						resp := p.get("a.test", "/")
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			total, top, bottom := int64(0), int64(0), int64(clients*perClient)
			for i := range counts {
				total += counts[i].Load()
				top = max(top, counts[i].Load())
				bottom = min(bottom, counts[i].Load())
			}
			if total != clients*perClient {
				t.Fatalf("backends saw %d requests; want %d", total, clients*perClient)
			}
			mean := float64(total) / backends
			bound := bounds[policy]
			if ratio := float64(top) / mean; ratio > bound || float64(bottom)/mean < 2-bound {
				t.Fatalf("max/mean share = %.3f, min/mean %.3f over %v; want within %.2f", ratio, float64(bottom)/mean, counts, bound)
			}
			want := float64(top) / mean
			st, ok := p.srv.Table().AppStats("a")
			if !ok || len(st.Backends) != backends || st.Imbalance < want-0.01 || st.Imbalance > want+0.01 {
				t.Fatalf("AppStats: ok=%v backends=%d imbalance=%.3f; want 4 backends, imbalance %.3f as counted",
					ok, len(st.Backends), st.Imbalance, want)
			}
			if got := p.metric("levee_backend_imbalance", map[string]string{"app": "a"}); got < want-0.01 || got > want+0.01 {
				t.Fatalf("levee_backend_imbalance = %.3f; want %.3f as counted", got, want)
			}
		})
	}
}

// A hot key pinned to one backend makes the distribution uneven: the alert
// rises, is logged once, and clears once the window has even traffic.
func TestImbalanceAlertRisesOnceAndClears(t *testing.T) {
	var addrs []string
	for range 4 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	base := fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", strings.Join(addrs, ", "))
	p := startProxyClock(t, base+"    balance: {hash: {key: header:X-User}}\n", clk)
	send := func(n int, user string) {
		for range n {
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
			req.Host = "a.test"
			req.Header.Set("X-User", user)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	send(200, "hot") // one key, one backend: imbalance 4
	clk.Advance(10 * time.Second)
	p.srv.apps.CheckDistribution(clk.Now())
	p.srv.apps.CheckDistribution(clk.Now())
	if got := p.metric("levee_backend_imbalance_alert", map[string]string{"app": "a"}); got != 1 {
		t.Fatalf("levee_backend_imbalance_alert = %v after a hot key; want 1", got)
	}
	if n := strings.Count(p.logs.String(), "backend distribution is uneven"); n != 1 {
		t.Fatalf("logged the alert %d times; want once per change", n)
	}
	if err := p.srv.Reload(mustParse(t, base+"    balance: round_robin\n")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // the hot minute leaves the window
	p.srv.apps.CheckDistribution(clk.Now())
	send(400, "any")
	clk.Advance(10 * time.Second)
	p.srv.apps.CheckDistribution(clk.Now())
	if got := p.metric("levee_backend_imbalance_alert", map[string]string{"app": "a"}); got != 0 {
		t.Fatalf("levee_backend_imbalance_alert = %v after even traffic; want 0", got)
	}
	if n := strings.Count(p.logs.String(), "backend distribution is even again"); n != 1 {
		t.Fatalf("logged the recovery %d times; want once", n)
	}
}
