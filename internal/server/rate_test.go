package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// rateProxy runs levee on a fake clock, so rate limits are exact and
// tests never depend on how fast the machine is.
func rateProxy(t *testing.T, limits string) (*proxy, *clock.Fake, *bodyBackend) {
	be := newBodyBackend(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: %s\n", be.addr(), limits), clk)
	return p, clk, be
}

func (p *proxy) getAs(apiKey string) *http.Response {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
	req.Host = "a.test"
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// asyncGetAs sends GET / for a.test as client apiKey (X-Api-Key) in the
// background; the response, or a status-0 one on a transport error, goes
// to out.
func (p *proxy) asyncGetAs(apiKey string, out chan<- *http.Response) {
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		req.Host = "a.test"
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- &http.Response{StatusCode: 0, Header: http.Header{}}
			return
		}
		resp.Body.Close()
		out <- resp
	}()
}

func TestAppRateAtTheBoundary(t *testing.T) {
	p, clk, be := rateProxy(t, "{rate: 10/s, burst: 5}")
	for i := range 5 {
		if r := p.getAs(""); r.StatusCode != 200 {
			t.Fatalf("request %d of the burst: %d; want 200", i+1, r.StatusCode)
		}
	}
	r := p.getAs("")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Levee-Reject") != "rate" {
		t.Fatalf("burst+1: %d %q; want 429 rate", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
	if got, want := r.Header.Get("Retry-After"), "1"; got != want { // 100ms, rounded up
		t.Errorf("Retry-After = %q; want %q", got, want)
	}
	if got, want := r.Header.Get("RateLimit-Policy"), `"a";q=10;w=1;levee-burst=5`; got != want {
		t.Errorf("RateLimit-Policy = %q; want %q", got, want)
	}
	if got := r.Header.Get("RateLimit"); got != `"a";r=0;t=1` {
		t.Errorf("RateLimit = %q; want %q", got, `"a";r=0;t=1`)
	}
	clk.Advance(100*time.Millisecond - time.Nanosecond)
	if r := p.getAs(""); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("1ns before the next slot: %d; want 429", r.StatusCode)
	}
	clk.Advance(time.Nanosecond)
	if r := p.getAs(""); r.StatusCode != 200 {
		t.Fatalf("at the next slot: %d; want 200", r.StatusCode)
	}
	if got := be.complete.Load(); got != 6 {
		t.Fatalf("backend served %d; want 6 (rejections cost no backend work)", got)
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "rate"}); got != 2 {
		t.Fatalf("levee_rejected_total{reason=rate} = %v; want 2", got)
	}
}

// Under 10x offered load, the admitted count over a window W is exactly
// burst + W×rate: the promise the storage edge did not keep.
func TestAppRateIsExactUnderTenfoldLoad(t *testing.T) {
	p, clk, _ := rateProxy(t, "{rate: 20/s, burst: 2}")
	admitted := 0
	for range 100 { // 5 s of simulated time, 200 requests/s offered
		for range 10 {
			if p.getAs("").StatusCode == 200 {
				admitted++
			}
		}
		clk.Advance(50 * time.Millisecond)
	}
	// Arrivals span [0, 4.95s]: burst 2 + ⌊4.95 × 20⌋ = 101.
	if admitted != 101 {
		t.Fatalf("admitted %d over 4.95 s at 10x load; want exactly 101 (burst 2 + 99)", admitted)
	}
}

func TestClientRateIsPerClientAndSparesTheAppBudget(t *testing.T) {
	p, _, _ := rateProxy(t, "{rate: 1/s, burst: 4, client: {key: header:X-Api-Key, rate: 1/s, burst: 1}}")
	if r := p.getAs("abuser"); r.StatusCode != 200 {
		t.Fatalf("abuser's first: %d", r.StatusCode)
	}
	for range 10 {
		r := p.getAs("abuser")
		if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Levee-Reject") != "client-rate" {
			t.Fatalf("abuser over its limit: %d %q; want 429 client-rate", r.StatusCode, r.Header.Get("Levee-Reject"))
		}
		if r.Header.Get("RateLimit-Policy") != `"a-client";q=1;w=1;levee-burst=1` {
			t.Fatalf("client RateLimit-Policy = %q", r.Header.Get("RateLimit-Policy"))
		}
	}
	// The abuser's refusals spent none of the app's budget of 4: three
	// other clients (one without a key) still get through.
	for _, key := range []string{"b", "c", ""} {
		if r := p.getAs(key); r.StatusCode != 200 {
			t.Fatalf("client %q: %d; want 200", key, r.StatusCode)
		}
	}
	if r := p.getAs("d"); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Levee-Reject") != "rate" {
		t.Fatalf("fifth client past the app burst: %d %q; want 429 rate", r.StatusCode, r.Header.Get("Levee-Reject"))
	}
}

// A reload keeps the limiter state: it never hands out a fresh burst.
func TestReloadKeepsRateState(t *testing.T) {
	p, _, be := rateProxy(t, "{rate: 1/s, burst: 2}")
	for range 2 {
		p.getAs("")
	}
	if r := p.getAs(""); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after the burst: %d; want 429", r.StatusCode)
	}
	cfg := mustParse(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: {rate: 1/s, burst: 2}\n", be.addr()))
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if r := p.getAs(""); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after a reload: %d; want 429 (no fresh burst)", r.StatusCode)
	}
}
