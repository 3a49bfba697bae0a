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
)

// namedBackend answers its name and records its peak concurrency.
func namedBackend(t *testing.T, name string, inflight, peak *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func appConfig(backend string, concurrency int) string {
	return fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: %d, queue: {max_wait: 30s, max_len: 10000, target: 1m}}
`, backend, concurrency)
}

// Reloads under steady load lose no request, and a limit never counts
// from zero again: requests admitted under the old config still hold
// their slots, so the backends never see more than the largest limit.
func TestReloadUnderLoadLosesNothingAndKeepsTheLimit(t *testing.T) {
	var inflight, peak atomic.Int64
	x := namedBackend(t, "X", &inflight, &peak)
	y := namedBackend(t, "Y", &inflight, &peak)
	cfgs := [2]string{appConfig(x, 4), appConfig(y, 2)}
	p := startProxy(t, cfgs[0])

	var stop atomic.Bool
	var ok, bad atomic.Int64
	var firstBad atomic.Pointer[struct{ s string }] // what the first failure was
	seen := sync.Map{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
				req.Host = "a.test"
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					firstBad.CompareAndSwap(nil, &struct{ s string }{err.Error()})
					bad.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					firstBad.CompareAndSwap(nil, &struct{ s string }{fmt.Sprintf("%d %s %q", resp.StatusCode, resp.Header, b)})
					bad.Add(1)
					continue
				}
				seen.Store(string(b), true)
				ok.Add(1)
			}
		})
	}
	for i := range 40 {
		want := ok.Load() + 20
		waitFor(t, "traffic between reloads", func() bool { return ok.Load() >= want })
		if err := p.srv.Reload(mustParse(t, cfgs[(i+1)%2])); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d requests failed across 40 reloads; want none; the first: %s", bad.Load(), ok.Load()+bad.Load(), firstBad.Load().s)
	}
	if _, x := seen.Load("X"); !x {
		t.Fatal("backend X never answered")
	}
	if _, y := seen.Load("Y"); !y {
		t.Fatal("backend Y never answered")
	}
	if got := peak.Load(); got > 4 {
		t.Fatalf("backends saw %d concurrent requests; the limit was never above 4", got)
	}
	if got := p.metric("levee_config_reloads_total", map[string]string{"result": "ok"}); got != 40 {
		t.Fatalf("levee_config_reloads_total{result=ok} = %v; want 40", got)
	}
}

func TestReloadRefusesListenerChangesWhole(t *testing.T) {
	var inflight, peak atomic.Int64
	x := namedBackend(t, "X", &inflight, &peak)
	y := namedBackend(t, "Y", &inflight, &peak)
	p := startProxy(t, appConfig(x, 4))
	next := mustParse(t, "listen: 127.0.0.1:1\n"+appConfig(y, 4))
	if err := p.srv.Reload(next); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("reload with a new listen address: err = %v; want a refusal naming listen", err)
	}
	if got := readAll(t, p.get("a.test", "/")); got != "X" {
		t.Fatalf("after a refused reload the proxy answers from %q; want the old backend X", got)
	}
	if got := p.metric("levee_config_reloads_total", map[string]string{"result": "error"}); got != 1 {
		t.Fatalf("levee_config_reloads_total{result=error} = %v; want 1", got)
	}
}

func TestReloadAddsAndRemovesApps(t *testing.T) {
	var inflight, peak atomic.Int64
	x := namedBackend(t, "X", &inflight, &peak)
	p := startProxy(t, appConfig(x, 4))
	if got := readAll(t, p.get("a.test", "/")); got != "X" {
		t.Fatalf("a.test → %q", got)
	}
	err := p.srv.Reload(mustParse(t, fmt.Sprintf("apps:\n  b:\n    hosts: [b.test]\n    backends: [%s]\n", x)))
	if err != nil {
		t.Fatal(err)
	}
	if resp := p.get("a.test", "/"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("removed app still routed: %d", resp.StatusCode)
	}
	if resp := p.get("b.test", "/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("added app not routed: %d", resp.StatusCode)
	}
	if got := p.metric("levee_requests_total", map[string]string{"app": "a"}); got != 0 {
		t.Fatalf("series of the removed app a still exported (%v)", got)
	}
}

func TestMetricsAreExported(t *testing.T) {
	var inflight, peak atomic.Int64
	x := namedBackend(t, "X", &inflight, &peak)
	p := startProxy(t, appConfig(x, 4))
	for range 3 {
		readAll(t, p.get("a.test", "/"))
	}
	if got := p.metric("levee_requests_total", map[string]string{"app": "a", "code": "200"}); got != 3 {
		t.Errorf("levee_requests_total{app=a,code=200} = %v; want 3", got)
	}
	if got := p.metric("levee_request_duration_seconds", map[string]string{"app": "a"}); got != 3 {
		t.Errorf("levee_request_duration_seconds{app=a} count = %v; want 3", got)
	}
	if got := p.metric("levee_backend_requests_total", map[string]string{"app": "a", "backend": x}); got != 3 {
		t.Errorf("levee_backend_requests_total{app=a,backend=%s} = %v; want 3", x, got)
	}
	if got := p.metric("levee_concurrency_limit", map[string]string{"app": "a"}); got != 4 {
		t.Errorf("levee_concurrency_limit{app=a} = %v; want 4", got)
	}
	mfs, err := p.srv.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"levee_requests_total", "levee_request_duration_seconds", "levee_inflight",
		"levee_queue_length", "levee_backend_requests_total", "levee_concurrency_limit"} {
		if !names[want] {
			t.Errorf("metric %s is not exported", want)
		}
	}
}
