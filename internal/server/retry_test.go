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

// statusBackend answers code to every request, counts them, and records
// the bodies of POSTs.
type statusBackend struct {
	addr  string
	hits  atomic.Int64
	mu    sync.Mutex
	posts []string
}

func newStatusBackend(t *testing.T, code int) *statusBackend {
	b := &statusBackend{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.hits.Add(1)
		if r.Method == http.MethodPost {
			b.mu.Lock()
			b.posts = append(b.posts, string(body))
			b.mu.Unlock()
		}
		w.WriteHeader(code)
		io.WriteString(w, "from backend")
	}))
	t.Cleanup(srv.Close)
	b.addr = strings.TrimPrefix(srv.URL, "http://")
	return b
}

func (p *proxy) do(method, host, body string) *http.Response {
	p.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, p.URL+"/", r)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func retryApp(backends, retry string) string {
	return fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    balance: round_robin
    ejection: {max_ejected: 0%%}
    retry: %s
`, backends, retry)
}

var appA = map[string]string{"app": "a"}

// Every GET whose first backend refuses the connection is retried on the
// live one.
func TestRetryConnectErrorGoesToLiveBackend(t *testing.T) {
	live := newStatusBackend(t, 200)
	dead := deadAddr(t)
	p := startProxy(t, retryApp(dead+", "+live.addr, "{budget: 100%}"))
	const n = 20
	for i := range n {
		if resp := p.do("GET", "a.test", ""); resp.StatusCode != 200 {
			t.Fatalf("GET %d: %d, want 200 (retried on the live backend)", i, resp.StatusCode)
		}
	}
	if live.hits.Load() != n {
		t.Fatalf("live backend served %d, want %d", live.hits.Load(), n)
	}
	toDead := p.metric("levee_backend_requests_total", map[string]string{"app": "a", "backend": dead})
	if got := p.metric("levee_retries_total", appA); got != toDead || got == 0 {
		t.Fatalf("levee_retries_total = %v, want the %v tries that went to the dead backend", got, toDead)
	}
}

// A POST is retried after a connect error (nothing was sent) and reaches
// the live backend exactly once, body intact.
func TestRetryPostOnConnectErrorOnly(t *testing.T) {
	live := newStatusBackend(t, 200)
	dead := deadAddr(t)
	p := startProxy(t, retryApp(dead+", "+live.addr, "{budget: 100%}"))
	const n = 6
	for i := range n {
		if resp := p.do("POST", "a.test", fmt.Sprintf("order-%d", i)); resp.StatusCode != 200 {
			t.Fatalf("POST %d: %d, want 200", i, resp.StatusCode)
		}
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	if len(live.posts) != n {
		t.Fatalf("live backend got %d POSTs, want %d: %q", len(live.posts), n, live.posts)
	}
	for i, b := range live.posts {
		if want := fmt.Sprintf("order-%d", i); b != want {
			t.Fatalf("POST %d reached the backend as %q, want %q", i, b, want)
		}
	}
}

// A listed status is retried for an idempotent GET, never for a POST.
func TestRetryStatusIdempotentOnly(t *testing.T) {
	bad := newStatusBackend(t, 503)
	good := newStatusBackend(t, 200)
	p := startProxy(t, retryApp(bad.addr+", "+good.addr, "{on: [503], budget: 100%}"))
	const n = 10
	for i := range n {
		if resp := p.do("GET", "a.test", ""); resp.StatusCode != 200 {
			t.Fatalf("GET %d: %d, want 200 (503 retried on the other backend)", i, resp.StatusCode)
		}
	}
	if good.hits.Load() != n {
		t.Fatalf("good backend served %d GETs, want %d", good.hits.Load(), n)
	}
	if got, want := p.metric("levee_retries_total", appA), float64(bad.hits.Load()); got != want {
		t.Fatalf("levee_retries_total = %v, want %v", got, want)
	}
	retries, badBefore, goodBefore := p.metric("levee_retries_total", appA), bad.hits.Load(), good.hits.Load()
	got503 := 0
	for i := range n {
		resp := p.do("POST", "a.test", fmt.Sprintf("p%d", i))
		if resp.StatusCode == 503 {
			got503++
		}
	}
	if bad.hits.Load()-badBefore != int64(got503) || good.hits.Load()-goodBefore != int64(n-got503) || got503 == 0 {
		t.Fatalf("POSTs: %d answered 503, bad backend got %d, good %d; want each POST sent once, 503s passed on",
			got503, bad.hits.Load()-badBefore, good.hits.Load()-goodBefore)
	}
	if p.metric("levee_retries_total", appA) != retries {
		t.Fatal("a POST was retried after a 503")
	}
}

// Under a burst where every try fails, retries stay within
// 20% of requests, counted exactly on a frozen clock.
func TestRetryBudgetBoundsRetries(t *testing.T) {
	a, b := newStatusBackend(t, 503), newStatusBackend(t, 503)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	p := startProxyClock(t, retryApp(a.addr+", "+b.addr, "{on: [503], budget: 20%}"), clk)
	const n = 50
	want := 0 // the budget's rule, replayed: retries+1 ≤ 20% × requests (no minimum by default)
	for k := 1; k <= n; k++ {
		if 100*(want+1) <= 20*k {
			want++
		}
		if resp := p.do("GET", "a.test", ""); resp.StatusCode != 503 {
			t.Fatalf("GET %d: %d, want the backend's 503", k, resp.StatusCode)
		}
	}
	retries := p.metric("levee_retries_total", appA)
	if retries != float64(want) || retries > 0.2*n {
		t.Fatalf("levee_retries_total = %v, want %d (≤ 0.2·%d)", retries, want, n)
	}
	if got := p.metric("levee_retry_budget_exhausted_total", appA); got != float64(n-want) {
		t.Fatalf("levee_retry_budget_exhausted_total = %v, want %d", got, n-want)
	}
	if hits := a.hits.Load() + b.hits.Load(); hits != int64(n+want) {
		t.Fatalf("backends got %d tries, want %d requests + %d retries", hits, n, want)
	}
}

// A request is tried at most `attempts` times, never twice on one backend.
func TestRetryAttemptsBound(t *testing.T) {
	bs := []*statusBackend{newStatusBackend(t, 503), newStatusBackend(t, 503), newStatusBackend(t, 503)}
	addrs := bs[0].addr + ", " + bs[1].addr + ", " + bs[2].addr
	total := func() int64 { return bs[0].hits.Load() + bs[1].hits.Load() + bs[2].hits.Load() }
	const n = 10
	p := startProxy(t, retryApp(addrs, "{on: [503], budget: 100%, attempts: 2}"))
	for range n {
		p.do("GET", "a.test", "")
	}
	if total() != 2*n {
		t.Fatalf("attempts 2: backends got %d tries for %d requests, want %d", total(), n, 2*n)
	}
	p.Stop()
	for _, b := range bs {
		b.hits.Store(0)
	}
	p = startProxy(t, retryApp(addrs, "{on: [503], budget: 100%, attempts: 5}"))
	for range n {
		p.do("GET", "a.test", "")
	}
	// Up to 2 retries each, but the 100% budget allows one retry per request.
	if want := int64(n + n); total() != want {
		t.Fatalf("attempts 5 over 3 backends: %d tries, want %d", total(), want)
	}
	for i, b := range bs {
		if b.hits.Load() > n {
			t.Fatalf("backend %d got %d tries for %d requests: one was tried twice there", i, b.hits.Load(), n)
		}
	}
}
