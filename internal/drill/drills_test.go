package drill

// Each drill runs briefly against a real levee (internal/server on loopback)
// configured to pass, and against a deliberately bad edge that must fail the
// check the drill is about, so the checks are shown to be able to fail.
// Load is bounded (about 1 s per phase); assertions are on verdicts that do
// not depend on how fast the machine is.

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/server"
)

// levee runs levee in-process on loopback; reload swaps its config.
type levee struct {
	url    string
	reload func(yaml string)
}

func startLevee(t *testing.T, yamlCfg string) *levee {
	t.Helper()
	return startLeveeOn(t, "listen: 127.0.0.1:0\n", yamlCfg)
}

// startLeveeOn is startLevee with listeners of the test's own (YAML).
func startLeveeOn(t *testing.T, listen, yamlCfg string) *levee {
	t.Helper()
	parse := func(y string) *config.Config {
		cfg, err := config.Parse([]byte(listen + "admin: 127.0.0.1:0\n" + y))
		if err != nil {
			t.Fatalf("config: %v\n%s", err, y)
		}
		return cfg
	}
	srv := server.New(parse(yamlCfg), server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("levee did not stop")
		}
	})
	return &levee{url: "http://" + srv.Addrs()[0].String(), reload: func(y string) {
		if err := srv.Reload(parse(y)); err != nil {
			t.Errorf("reload: %v", err)
		}
	}}
}

// backend answers 200 after reading the whole body.
func backend(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// plainProxy is an edge with no protection at all.
func plainProxy(t *testing.T, to string) string {
	u, _ := url.Parse("http://" + to)
	s := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(s.Close)
	return s.URL
}

// brief is a short drill whose latency bounds only catch gross failures: a
// loaded CI machine (race detector, parallel packages) can stall the whole
// process for a second, and a passing verdict must not depend on its speed.
// The bad-edge halves fail on counts, or on a bound they set themselves.
func brief(o Options) Options {
	o.Duration = 600 * time.Millisecond
	o.MaxInFlight = 256
	o.Clients = 50
	o.Timeout = 15 * time.Second
	o.P99Slack = 10 * time.Second
	o.RefuseWithin = 10 * time.Second
	o.ColdBound = 10 * time.Second
	return o.Defaults()
}

func checkNamed(t *testing.T, r *Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no check %q in %+v", r.Drill, name, r.Checks)
	return Check{}
}

func requireVerdict(t *testing.T, r *Report, want string) {
	t.Helper()
	if r.Verdict != want {
		var card strings.Builder
		_ = NewCard(r.Target, time.Now(), []*Report{r}).WriteTable(&card)
		t.Fatalf("%s: %s (%s); want %s\n%s", r.Drill, r.Verdict, r.Reason, want, card.String())
	}
}

func TestTenantLimitDrill(t *testing.T) {
	be := backend(t)
	lv := startLevee(t, `apps:
  t: {hosts: [tenant.test], backends: [`+be+`], limits: {rate: 50/s}}
  o: {hosts: [other.test], backends: [`+be+`]}
`)
	o := brief(Options{Target: lv.url, Host: "tenant.test", OtherHost: "other.test", Limit: 50, Offered: 10, OtherRate: 20, Tolerance: 0.25})
	// a stepped flood: twice the limit, then ten times
	o.OfferedSteps = []Step{{Rate: 2, For: 500 * time.Millisecond}, {Rate: 10, For: 500 * time.Millisecond}}
	r := tenantLimit.Run(context.Background(), o)
	requireVerdict(t, r, Pass)
	if r.Streams[0].Scheduled != 50+250 {
		t.Fatalf("stepped flood scheduled %d; want 50 + 250", r.Streams[0].Scheduled)
	}

	o.OfferedSteps = nil
	o.Target = plainProxy(t, be)
	r = tenantLimit.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "admitted rate").Pass {
		t.Fatal("an edge without limits passed the admitted-rate check")
	}
}

func TestBatchStormDrill(t *testing.T) {
	be := backend(t)
	lv := startLevee(t, `apps:
  t: {hosts: [tenant.test], backends: [`+be+`], limits: {batch: {json_field: uris, max: 1000}}}
`)
	o := brief(Options{Target: lv.url, Host: "tenant.test", NormalRate: 100, BatchRate: 10})
	requireVerdict(t, batchStorm.Run(context.Background(), o), Pass)

	o.Target = plainProxy(t, be)
	r := batchStorm.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "huge batches refused quickly").Pass {
		t.Fatal("an edge that forwards every batch passed the refusal check")
	}
}

func TestDistributionDrill(t *testing.T) {
	lv := startLevee(t, "apps:\n  drill: {hosts: [drill.test], backends: [127.0.0.1:1]}\n")
	o := brief(Options{Target: lv.url, DistHost: "drill.test", Backends: 4, Slow: 1, DistRate: 300, RouteWait: waitTimeout})
	o.OnBackends = func(snippet string, _ []*Backend) error { lv.reload(snippet); return nil }
	r := distribution.Run(context.Background(), o)
	requireVerdict(t, r, Pass)

	// round robin: every backend, the slow one too, gets the same share
	var targets atomic.Pointer[[]*url.URL]
	var next atomic.Uint64
	rr := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		ts := *targets.Load()
		pr.SetURL(ts[next.Add(1)%uint64(len(ts))])
	}})
	t.Cleanup(rr.Close)
	o.Target = rr.URL
	o.OnBackends = func(_ string, bs []*Backend) error {
		var ts []*url.URL
		for _, b := range bs {
			ts = append(ts, &url.URL{Scheme: "http", Host: b.Addr})
		}
		targets.Store(&ts)
		return nil
	}
	r = distribution.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "slow backend 1 gets less").Pass {
		t.Fatal("round robin passed the slow-backend check")
	}
}

func TestColdCatalogDrill(t *testing.T) {
	be := backend(t)
	lv := startLevee(t, `apps:
  hot: {hosts: [hot.test], backends: [`+be+`]}
  cold: {hosts: ["*.cold.test"], backends: [`+be+`]}
`)
	o := brief(Options{Target: lv.url, Host: "hot.test", ColdDomain: "cold.test", ColdHosts: 150, ColdRate: 1000, NormalRate: 100})
	requireVerdict(t, coldCatalog.Run(context.Background(), o), Pass)

	// An edge that loads each unseen host under one lock, 10 ms a load, and
	// looks every host up under the same lock: a cold wave queues everyone.
	var mu sync.Mutex
	seen := map[string]bool{}
	u, _ := url.Parse("http://" + be)
	rp := httputil.NewSingleHostReverseProxy(u)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if !seen[r.Host] {
			time.Sleep(10 * time.Millisecond)
			seen[r.Host] = true
		}
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(bad.Close)
	o.Target = bad.URL
	o.ColdBound = time.Second // 150 loads in a row take 1.5 s: a third wait longer
	r := coldCatalog.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "cold hosts served or shed in time").Pass {
		t.Fatal("an edge queueing cold loads without bound passed the cold check")
	}
}

func TestDrillErrorsWhenNothingAnswers(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL
	srv.Close() // nothing listens there now
	o := brief(Options{Target: dead, Host: "a.test", OtherHost: "b.test", Limit: 10, Offered: 2, OtherRate: 5})
	o.Duration = 200 * time.Millisecond
	if r := tenantLimit.Run(context.Background(), o); r.Verdict != Errored || !strings.Contains(r.Reason, "no answer") {
		t.Fatalf("against a closed port: %s %q; want an error saying nothing answered", r.Verdict, r.Reason)
	}
}

func TestDrillSkipsWithoutItsFlags(t *testing.T) {
	for _, d := range All {
		r := d.Run(context.Background(), Options{}.Defaults())
		if r.Verdict != Skipped || !strings.HasPrefix(r.Reason, "needs ") {
			t.Errorf("%s with no flags: %s %q; want skipped, naming what it needs", d.Name, r.Verdict, r.Reason)
		}
	}
}

// duplicate-instance errors, rather than taking a config error for a refusal,
// when the config does not pass `levee check` (here: a stand-in binary that
// fails every command).
func TestDuplicateInstanceRejectsABadConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "levee")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'levee.yaml: 1 problem(s)'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "levee.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := brief(Options{Config: cfg, Levee: bin, Host: "a.test", Limit: 10})
	r := duplicateInstance.Run(context.Background(), o)
	if r.Verdict != Errored || !strings.Contains(r.Reason, "levee check") {
		t.Fatalf("%s %q; want an error naming levee check", r.Verdict, r.Reason)
	}
}

// overloadBrief is a short overload drill: 8 slots x 80 ms = 100/s, offered
// 300/s for 1 s. Bounds are loose for the passing edge (a stalled machine
// must not fail it); the failing edges fail on counts.
func overloadBrief(o Options) Options {
	o = brief(o)
	o.OverloadHost, o.Slots, o.ServiceTime, o.OverOffered = "over.test", 8, 80*time.Millisecond, 3
	o.Duration = time.Second
	o.MaxInFlight = 512 // a stall of 1.7 s before the passing edge overflows
	o.MinGoodput = 0.4  // a shedding edge keeps ~0.95; concurrency 1 of 8 slots gets <= 0.125
	o.RouteWait = waitTimeout
	return o
}

func TestOverloadDrill(t *testing.T) {
	lv := startLevee(t, "apps:\n  overload: {hosts: [over.test], backends: [127.0.0.1:1]}\n")
	o := overloadBrief(Options{Target: lv.url})
	var printed strings.Builder
	o.Log = &printed
	o.OnBackends = func(snippet string, _ []*Backend) error { lv.reload(snippet); return nil }
	r := overload.Run(context.Background(), o)
	requireVerdict(t, r, Pass)
	if !strings.Contains(printed.String(), "concurrency: 8, queue: {max_wait: 10ms, max_len: 16}") {
		t.Fatalf("the snippet does not fit the backend's 8 slots:\n%s", printed.String())
	}

	// sheds too much: one request at a time to a backend with 8 slots
	o.OnBackends = func(_ string, bs []*Backend) error {
		lv.reload("apps:\n  overload: {hosts: [over.test], backends: [" + bs[0].Addr + "], limits: {concurrency: 1}}\n")
		return nil
	}
	r = overload.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "goodput (2xx/s ÷ capacity)").Pass {
		t.Fatal("an edge that lets 1 request of 8 through passed the goodput check")
	}

	// queues without bound: every request goes on to wait at the backend,
	// until the client gives up
	var to atomic.Pointer[url.URL]
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(to.Load()) },
		Transport: &http.Transport{MaxIdleConnsPerHost: 512},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	queueing := httptest.NewServer(rp)
	t.Cleanup(queueing.Close)
	o.Target = queueing.URL
	o.OnBackends = func(_ string, bs []*Backend) error { to.Store(&url.URL{Scheme: "http", Host: bs[0].Addr}); return nil }
	// A client that waits 500 ms: the backend's queue passes that after
	// 250 ms at 200/s more than it serves, however fast the machine.
	o.Timeout = 500 * time.Millisecond
	r = overload.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if checkNamed(t, r, "excess refused at once, not timed out").Pass || r.Streams[1].Timeouts == 0 {
		t.Fatalf("an edge that queues until the client times out passed the shedding check: %+v", r.Streams[1])
	}
}

// The backend's slots are held for the service time whether or not the
// client still waits, and requests beyond them wait; closing it ends the wait.
func TestPoolBackendHoldsSlotsForClientsThatLeft(t *testing.T) {
	b, err := StartPool(1, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := NewHTTPDoer("http://"+b.Addr, 4)
	defer d.Close()
	poll := func(what string, cond func() bool) { t.Helper(); waitFor(t, what, cond) }
	ctx, leave := context.WithCancel(context.Background())
	first := make(chan Response, 1)
	go func() { first <- d.Do(ctx, &Request{Path: "/"}) }()
	poll("the first request holds the slot", func() bool { return len(b.pool.slots) == 1 })
	leave()
	if r := <-first; r.Err == nil {
		t.Fatalf("the first client left, yet got %+v", r)
	}
	second := make(chan Response, 1)
	go func() { second <- d.Do(context.Background(), &Request{Path: "/"}) }()
	poll("the second request waits", func() bool { return b.pool.waiting.Load() == 1 })
	if len(b.pool.slots) != 1 || b.PeakWaiting() != 1 {
		t.Fatalf("slots taken %d, peak waiting %d; want the slot still held for the client that left, 1 waiting", len(b.pool.slots), b.PeakWaiting())
	}
	CloseBackends([]*Backend{b})
	if r := <-second; r.Err == nil && r.Status != http.StatusServiceUnavailable {
		t.Fatalf("closing the backend: the waiting request got %+v; want a 503 or an error", r)
	}
	if b.Count() != 0 || b.pool.waiting.Load() != 0 {
		t.Fatalf("served %d, waiting %d after close; want 0, 0", b.Count(), b.pool.waiting.Load())
	}
}
