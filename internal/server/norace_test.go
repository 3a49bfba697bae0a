//go:build !race

// The tests in this file measure allocations, heap or a flood's full size:
// under -race sync.Pool drops items at random and shadow memory skews the
// heap, so they are built only without it. CI runs every test in a file
// built with "!race" in a step of its own, without -race (.ci/run): a test
// here cannot drop out of CI by its name.

package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/valyala/fasthttp"
)

// floodProxied is how many failing calls TestProxiedFailureFloodLogsAreBounded
// makes through a real listener.
const floodProxied = 50_000

// The million-call flood: see TestFailureFloodLogsAreBounded.
func TestFailureFloodOfAMillionLogsAreBounded(t *testing.T) { testFailureFlood(t, 1_000_000) }

// TestFastAdmissionWithoutWaitingAllocatesNothing: the admission of a
// request that gets its slot at once allocates nothing.
func TestFastAdmissionWithoutWaitingAllocatesNothing(t *testing.T) {
	if allocs := admitAtOnce(t, "limits: {concurrency: 2, queue: {max_len: 4, max_wait: 1m}}"); allocs != 0 {
		t.Fatalf("%v allocations per admission; want 0", allocs)
	}
}

// A rejection on the fasthttp engine allocates nothing.
func TestRejectFastAllocatesNothing(t *testing.T) {
	p := New(mustParse(t, "apps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n    limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}}\n"), Options{})
	a := p.view("a")
	if err := a.Limiter.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer a.Limiter.Release()
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, nil, nil) // a ctx with fasthttp's stand-in server
	allocs := testing.AllocsPerRun(100, func() {
		fastRequest(&ctx, "a.test")
		p.serveFast(&ctx)
	})
	if ctx.Response.StatusCode() != http.StatusServiceUnavailable || string(ctx.Response.Header.Peek("Levee-Reject")) != "queue-full" {
		t.Fatalf("status %d Levee-Reject %q, want 503 queue-full", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Levee-Reject"))
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per rejection, want 0", allocs)
	}
}

// A refusal allocates nothing, whatever its reason: under overload most
// requests are refusals. (The first of each case's requests may pass, to
// spend a burst; AllocsPerRun does not count it.)
func TestRefusalsAllocateNothing(t *testing.T) {
	for _, rc := range refusalCases {
		t.Run(rc.reason, func(t *testing.T) {
			p, ctx := refusalServer(t, rc)
			allocs := testing.AllocsPerRun(100, func() { refusalRequest(p, ctx, rc) })
			checkRefusal(t, ctx, rc)
			if allocs != 0 {
				t.Errorf("%v allocations per %s refusal, want 0", allocs, rc.reason)
			}
		})
	}
	// Reasons refused after a wait, a load or a pick are not set up here;
	// their rows are checked in package reply (TestEveryStepsReasonHasARow).
}

// Counting the top clients adds no allocation to a request, on either engine.
func TestTopClientsAddNoAllocation(t *testing.T) {
	perReject := func(topK int) (nethttp, fast float64) {
		p := New(mustParse(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n"+
			"    limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}, client: {top_k: %d}}\n", topK)), Options{})
		if err := p.view("a").Limiter.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer p.view("a").Limiter.Release()
		req := originRequest("a.test")
		w := discardWriter{h: http.Header{}}
		nethttp = testing.AllocsPerRun(100, func() {
			clear(w.h)
			p.ServeHTTP(&w, req)
		})
		if w.code != http.StatusServiceUnavailable {
			t.Fatalf("net/http: status %d; want the queue's 503", w.code)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, nil, nil)
		fast = testing.AllocsPerRun(100, func() {
			fastRequest(&ctx, "a.test")
			p.serveFast(&ctx)
		})
		if c := ctx.Response.StatusCode(); c != http.StatusServiceUnavailable {
			t.Fatalf("fasthttp: status %d; want the queue's 503", c)
		}
		if p.view("a").Top.K() != topK {
			t.Fatalf("top_k %d: the app keeps %d", topK, p.view("a").Top.K())
		}
		return nethttp, fast
	}
	offHTTP, offFast := perReject(0)
	onHTTP, onFast := perReject(16)
	if onHTTP != offHTTP || onFast != offFast {
		t.Fatalf("allocations per rejection: net/http %v → %v, fasthttp %v → %v with top_k on; want no change", offHTTP, onHTTP, offFast, onFast)
	}
}

// TestProxiedRequestAllocatesOnce bounds what a request proxied on
// HTTP/1.1 allocates, in levee, the backend and the client together: one
// object, the backend body's reader (h1Body). The answer's body
// (fastBody) comes from a pool; allocated a request, it was a second
// object and a third of the heap's growth at 1,024 connections.
// AllocsPerRun rounds down, so a stray allocation of a timer or the
// runtime in 500 requests does not count.
func TestProxiedRequestAllocatesOnce(t *testing.T) {
	get := proxyH1Getter(t)
	if n := testing.AllocsPerRun(500, get); n > 1 {
		t.Errorf("%v allocations a proxied request, want at most 1", n)
	}
}

// A stored app with default limits holds at most 4 KB of heap: no rate
// table, top-K sketch, metrics series or client of its own until it needs
// them (issue 13: a cold app was 34 KB).
//
// The heap is the process's: what the package's other tests allocate
// meanwhile (their servers' health checks and logs) only adds to it. The
// least of three measures is the stored apps' own; it was 3,047-3,052 B
// on 2026-12-06 (BenchmarkStoredAppMemory). One measure alone can read
// more: 4,097 in a CI run when the least was 4,079-4,085.
func TestStoredAppHeapIsSmall(t *testing.T) {
	per := heapPerStoredApp(t, 2000)
	for range 2 {
		per = min(per, heapPerStoredApp(t, 2000))
	}
	if per > 4096 {
		t.Fatalf("a stored app holds %.0f B of heap, want ≤ 4096", per)
	}
}

// TestTracingUnsampledAllocatesNothing: on HTTP/1.1, tracing on adds no
// allocation to a request it does not sample, served or refused.
func TestTracingUnsampledAllocatesNothing(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	run := func(tracing string) (served, refused float64) {
		cfg := fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: {concurrency: 2, queue: {max_len: 0, max_wait: 0s}}\n%s",
			strings.TrimPrefix(backend.URL, "http://"), tracing)
		p := New(mustParse(t, cfg), Options{})
		ctx := new(fasthttp.RequestCtx)
		ctx.Init2(netlimit.Wrap(fakeConn{}), nil, false)
		unsampled := clientTP[:53] + "00"
		serve := func() {
			fastRequest(ctx, "a.test")
			ctx.Request.Header.Set("traceparent", unsampled)
			ctx.Request.Header.Set("tracestate", "rojo=1")
			p.serveFast(ctx)
			if ctx.Response.StatusCode() != http.StatusOK && ctx.Response.StatusCode() != http.StatusServiceUnavailable {
				t.Fatalf("status %d", ctx.Response.StatusCode())
			}
			if bs := ctx.Response.BodyStream(); bs != nil {
				io.Copy(io.Discard, bs)
				ctx.Response.CloseBodyStream()
			}
		}
		serve() // warm the pools and the connection
		served = testing.AllocsPerRun(50, serve)
		a := p.view("a")
		a.Limiter.Acquire(t.Context())
		a.Limiter.Acquire(t.Context())
		refused = testing.AllocsPerRun(50, serve)
		a.Limiter.Release()
		a.Limiter.Release()
		return served, refused
	}
	offServed, offRefused := run("")
	onServed, onRefused := run("tracing: {endpoint: 'http://127.0.0.1:9', sample_ratio: 0, refusals_per_second: 0}\n")
	if onServed > offServed || onRefused > offRefused || onRefused != 0 {
		t.Fatalf("allocs per request: off %v served, %v refused; on (unsampled) %v, %v", offServed, offRefused, onServed, onRefused)
	}
	t.Logf("allocs per request: off %v served, %v refused; on (unsampled) %v, %v", offServed, offRefused, onServed, onRefused)
}
