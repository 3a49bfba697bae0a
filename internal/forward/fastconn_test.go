package forward

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
)

// fastDo sends method path through hc and returns the streamed response.
func fastDo(hc *fasthttp.HostClient, method, path string) (*fasthttp.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + hc.Addr + path)
	resp := fasthttp.AcquireResponse()
	if err := hc.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

func fastGet(t *testing.T, hc *fasthttp.HostClient, method, path string) *fasthttp.Response {
	t.Helper()
	resp, err := fastDo(hc, method, path)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// drain reads resp's body to its end, then releases it as ServeFast does.
func drain(t *testing.T, resp *fasthttp.Response) {
	t.Helper()
	if bs := resp.BodyStream(); bs != nil {
		if _, err := io.Copy(io.Discard, bs); err != nil {
			t.Fatal(err)
		}
	}
	releaseBody(resp, nil)
	fasthttp.ReleaseResponse(resp)
}

// Every connection of a burst goes back to the pool, whatever
// max_idle_per_backend says (the pool is never smaller than the
// connections in use: nothing is closed only to be dialled again), and the
// idle count follows the pool through every way a connection leaves it:
// reused, closed for an unread body, closed by close.
func TestFastIdleCountFollowsThePool(t *testing.T) {
	const maxIdle, burst = 3, 8
	var arrived sync.WaitGroup
	arrived.Add(burst)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/burst" {
			arrived.Done()
			<-release
		}
		io.WriteString(w, strings.Repeat("x", 10<<10))
	}))
	defer srv.Close()
	u := config.Default().Upstream
	u.MaxIdlePerBackend = maxIdle
	hc, _, pool := newFastClient(strings.TrimPrefix(srv.URL, "http://"), u, nil, nil)

	type result struct {
		resp *fasthttp.Response
		err  error
	}
	results := make(chan result, burst)
	for range burst {
		go func() {
			resp, err := fastDo(hc, fasthttp.MethodGet, "/burst")
			results <- result{resp, err}
		}()
	}
	allArrived := make(chan struct{})
	go func() { arrived.Wait(); close(allArrived) }()
	select {
	case <-allArrived:
	case r := <-results: // a request failed before reaching the backend
		close(release)
		t.Fatalf("answered before the burst was released: %v", r.err)
	}
	close(release)
	var idle *PoolStats
	for range burst {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		idle = connOf(r.resp).stats
		drain(t, r.resp)
	}
	check := func(when string, want int64) {
		t.Helper()
		if n, pooled := idle.idle.Load(), pool.idleConns(); n != want || int64(pooled) != want {
			t.Fatalf("%s: counted %d idle, the pool holds %d; want %d", when, n, pooled, want)
		}
	}
	check("after the burst", burst)
	dials := idle.dials.Load()

	for range 2 * burst {
		drain(t, fastGet(t, hc, fasthttp.MethodGet, "/"))
	}
	check("after reusing them", burst)
	if conns := pool.openConns(); conns != burst || idle.dials.Load() != dials {
		t.Fatalf("%d connections, %d dials after reusing the idle ones, want %d and none", conns, idle.dials.Load()-dials, burst)
	}

	resp := fastGet(t, hc, fasthttp.MethodGet, "/") // its body left unread: fasthttp closes it
	releaseBody(resp, nil)
	fasthttp.ReleaseResponse(resp)
	check("after an unread body", burst-1)
	if c := idle.Counts(); c.Open != burst-1 || c.Exchanges != uint64(burst+2*burst+1) {
		t.Fatalf("counts %+v: want %d open and %d exchanges", c, burst-1, 3*burst+1)
	}

	pool.close(false)
	check("after close", 0)
	if conns := pool.openConns(); conns != 0 {
		t.Fatalf("%d connections after close, want 0", conns)
	}
}

// A response without a body (HEAD) gives its connection back inside Do,
// counted against max_idle_per_backend like any other (exchange.release).
func TestFastBodylessResponseCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "body")
	}))
	defer srv.Close()
	hc, _, pool := newFastClient(strings.TrimPrefix(srv.URL, "http://"), config.Default().Upstream, nil, nil)
	resp := fastGet(t, hc, fasthttp.MethodHead, "/")
	idle := connOf(resp).stats
	drain(t, resp)
	if n, pooled := idle.idle.Load(), pool.idleConns(); n != 1 || pooled != 1 {
		t.Fatalf("after a HEAD: counted %d idle, the pool holds %d; want 1 and 1", n, pooled)
	}
	drain(t, fastGet(t, hc, fasthttp.MethodGet, "/")) // reuses it, and counts it
	if n, pooled := idle.idle.Load(), pool.idleConns(); n != 1 || pooled != 1 {
		t.Fatalf("after a GET on it: counted %d idle, the pool holds %d; want 1 and 1", n, pooled)
	}
}
