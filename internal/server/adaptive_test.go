package server

import (
	"fmt"
	"io"
	"sync"
	"testing"
)

// An adaptive limit starts at min(max, 2×min), moves only between min and
// max, and is what the limiter enforces and the metrics show. (Its
// convergence near a backend's capacity is shown on a simulated backend in
// internal/admit/limit, where time is fake and the result exact.)
func TestAdaptiveConcurrencyIsWiredAndBounded(t *testing.T) {
	be := newBodyBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: {adaptive: gradient, min: 4, max: 16}}
`, be.addr()))
	a := p.app("a")
	if got := a.Limiter.Limits().Concurrency; got != 8 {
		t.Fatalf("initial adaptive limit %d; want min(max, 2×min) = 8", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				resp := p.get("a.test", "/")
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	got := a.Limiter.Limits().Concurrency
	if got < 4 || got > 16 {
		t.Fatalf("adaptive limit %d after traffic; want within [4, 16]", got)
	}
	if m := p.metric("levee_concurrency_limit", map[string]string{"app": "a"}); int(m) != got {
		t.Fatalf("levee_concurrency_limit = %v; want the enforced %d", m, got)
	}
	// A reload with the same bounds keeps what the algorithm learnt.
	cfg := mustParse(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: {concurrency: {adaptive: gradient, min: 4, max: 16}}\n", be.addr()))
	ad := a.Adaptive
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if p.app("a").Adaptive != ad {
		t.Fatal("a reload with unchanged bounds replaced the adaptive limit")
	}
}
