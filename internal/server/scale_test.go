package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/protect"
)

// fakeSampler hands the overload monitor whatever the test sets.
type fakeSampler struct {
	mu sync.Mutex
	s  overload.Sample
	n  int
}

func (f *fakeSampler) set(s overload.Sample) {
	f.mu.Lock()
	f.s = s
	f.mu.Unlock()
}

func (f *fakeSampler) Sample() overload.Sample {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.s
}

func (f *fakeSampler) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func coolSample() overload.Sample {
	return overload.Sample{CPU: 0.2, Load: 0.3, Memory: 0.3, Goroutines: 50, GCPause: time.Millisecond}
}

func hotCPU(cpu float64) overload.Sample {
	s := coolSample()
	s.CPU = cpu
	return s
}

const scaledApps = `
instance: {strict_fraction: 10%%}
overload: {enabled: %v}
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:1]
    limits:
      concurrency: 50
      rate: 100/s
      burst: 20
      client: {key: "header:X-Api-Key", rate: 10/s, burst: 5}
      bandwidth: 1MB/s
    backend_limits: {inflight: 20, rate: 100/s}
  small:
    hosts: [small.test]
    backends: [127.0.0.1:1]
    limits: {concurrency: 3, rate: 1/s, burst: 1}
  adaptive:
    hosts: [adaptive.test]
    backends: [127.0.0.1:1]
    limits: {concurrency: {adaptive: gradient, min: 20, max: 200}}
`

func newScaleServer(t *testing.T, overloadOn bool, sampler overload.Sampler) (*Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s := New(mustParse(t, fmt.Sprintf(scaledApps, overloadOn)), Options{Clock: clk, Sampler: sampler,
		Logger: slog.New(slog.DiscardHandler)})
	return s, clk
}

// burstOf counts how many requests in a row one rate limit of app admits
// at one instant, on the route as composed now.
func burstOf(t *testing.T, s *Server, host, client string, now time.Time) int {
	t.Helper()
	rt, ok := s.current.Load().catalog.Lookup(host, "/")
	if !ok {
		t.Fatalf("no route for %s", host)
	}
	n := 0
	for ; n < 1000; n++ {
		if _, ok := rt.LimitRate(client, now); !ok {
			return n
		}
	}
	return n
}

func (s *Server) concurrencyOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view(name).Limiter.Limits().Concurrency
}

func (s *Server) guardStats(name string) protect.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view(name).Guard.Stats()
}

func gauge(t *testing.T, s *Server, name string, labels map[string]string) float64 {
	t.Helper()
	p := &proxy{t: t, srv: s}
	return p.metric(name, labels)
}

// TestStrictScalesEveryLimit: an unexpected instance enforces
// strict_fraction of every concurrency, rate, client rate and bandwidth
// limit, at least 1, and gets them all back when it becomes active.
func TestStrictScalesEveryLimit(t *testing.T) {
	s, clk := newScaleServer(t, false, nil)
	if got := gauge(t, s, "levee_instance_role", map[string]string{"role": "active"}); got != 1 {
		t.Fatalf(`levee_instance_role{role="active"} = %v at start, want 1`, got)
	}
	s.SetUnexpected(true)
	if got := s.concurrencyOf("a"); got != 5 {
		t.Errorf("strict concurrency = %d, want 10%% of 50", got)
	}
	if got := s.concurrencyOf("small"); got != 1 {
		t.Errorf("strict concurrency of 3 = %d, want at least 1", got)
	}
	if got := s.concurrencyOf("adaptive"); got != 4 { // the gradient starts at 2×min, 40
		t.Errorf("strict adaptive concurrency = %d, want 10%% of 40", got)
	}
	now := clk.Now()
	if got := burstOf(t, s, "a.test", "k1", now); got != 1 { // client burst 5 → 1 binds first
		t.Errorf("strict client burst = %d, want max(1, 10%% of 5)", got)
	}
	admitted := 0
	for i := range 10 { // one request per client: the app's burst (20 → 2) binds
		admitted += burstOf(t, s, "a.test", fmt.Sprintf("c%d", i), now.Add(time.Second))
	}
	if admitted != 2 {
		t.Errorf("strict app burst admitted %d, want 10%% of 20", admitted)
	}
	s.mu.Lock()
	bw, bwLim := s.view("a").Bandwidth.Rate(), s.view("a").Bandwidth
	s.mu.Unlock()
	if bw != 100_000 || bwLim.Rate() != 100_000 {
		t.Errorf("strict bandwidth = %d B/s (limiter %d), want 10%% of 1MB/s", bw, bwLim.Rate())
	}
	if st := s.guardStats("a"); st.InflightLimit != 2 || st.Rate != 10 {
		t.Errorf("strict backend_limits: inflight %d rate %v/s, want 10%% of 20 and of 100/s", st.InflightLimit, st.Rate)
	}
	if s.guardStats("small") != (protect.Stats{}) {
		t.Errorf("strict turned on backend_limits that were off")
	}
	if got := gauge(t, s, "levee_instance_role", map[string]string{"role": "unexpected"}); got != 1 {
		t.Errorf(`levee_instance_role{role="unexpected"} = %v, want 1`, got)
	}

	s.SetUnexpected(false) // took over the lock
	if got := s.concurrencyOf("a"); got != 50 {
		t.Errorf("active concurrency = %d, want 50", got)
	}
	if got := burstOf(t, s, "a.test", "fresh", now.Add(time.Hour)); got != 5 {
		t.Errorf("active client burst = %d, want 5", got)
	}
	s.mu.Lock()
	bw = s.view("a").Bandwidth.Rate()
	sameLim := s.view("a").Bandwidth == bwLim
	s.mu.Unlock()
	if bw != 1_000_000 || bwLim.Rate() != 1_000_000 || !sameLim {
		t.Errorf("active bandwidth = %d B/s (limiter %d, kept %v), want 1MB/s set in place", bw, bwLim.Rate(), sameLim)
	}
	if st := s.guardStats("a"); st.InflightLimit != 20 || st.Rate != 100 {
		t.Errorf("active backend_limits: inflight %d rate %v/s, want 20 and 100/s", st.InflightLimit, st.Rate)
	}
	if got := gauge(t, s, "levee_instance_role", map[string]string{"role": "active"}); got != 1 {
		t.Errorf(`levee_instance_role{role="active"} = %v after takeover, want 1`, got)
	}
}

// TestStrictSurvivesReload: a reload keeps an unexpected instance strict,
// with the new config's fraction.
func TestStrictSurvivesReload(t *testing.T) {
	s, _ := newScaleServer(t, false, nil)
	s.SetUnexpected(true)
	next := mustParse(t, fmt.Sprintf(scaledApps, false))
	next.Instance.StrictFraction = 50
	if err := s.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := s.concurrencyOf("a"); got != 25 {
		t.Errorf("after reload: concurrency %d, want 50%% of 50", got)
	}
}

// TestOverloadTightensAndRecovers drives the monitor with injected samples:
// a hot host tightens every app's concurrency and rate limits at once, a
// cool one brings them back in steps, and the configured values are never
// lost.
func TestOverloadTightensAndRecovers(t *testing.T) {
	fs := &fakeSampler{s: coolSample()}
	s, clk := newScaleServer(t, true, fs)
	s.apps.OverloadTick()
	if got := s.concurrencyOf("a"); got != 50 {
		t.Fatalf("cool host: concurrency %d, want 50", got)
	}
	fs.set(hotCPU(1))
	s.apps.OverloadTick()
	if got := gauge(t, s, "levee_overload_factor", nil); got != 0.1 {
		t.Errorf("levee_overload_factor = %v, want the floor 0.1", got)
	}
	if got := gauge(t, s, "levee_overload_signal", map[string]string{"signal": "cpu"}); got != 1 {
		t.Errorf(`levee_overload_signal{signal="cpu"} = %v, want 1`, got)
	}
	for app, want := range map[string]int{"a": 5, "small": 1, "adaptive": 4} {
		if got := s.concurrencyOf(app); got != want {
			t.Errorf("hot host: %s concurrency %d, want %d", app, got, want)
		}
	}
	// The admin API shows the factor, the reading, and why the limits differ.
	in := s.Instance()
	if in.OverloadFactor != 0.1 || in.Signals == nil || in.Signals.CPU != 1 {
		t.Errorf("instance: factor %v, signals %+v; want 0.1 and the hot CPU", in.OverloadFactor, in.Signals)
	}
	if b, _ := json.Marshal(in); !strings.Contains(string(b), `"cpu":1`) || !strings.Contains(string(b), `"gc_pause_seconds":`) {
		t.Errorf("instance JSON %s; want overload_signals with lowercase keys", b)
	}
	if d, _ := s.Table().App("a"); d.InForce.Concurrency != 5 || len(d.Why) != 1 || !strings.Contains(d.Why[0], "overloaded") {
		t.Errorf("app a: in force %+v, why %q; want 5 and the overload named", d.InForce, d.Why)
	}
	if got := burstOf(t, s, "small.test", "", clk.Now()); got != 1 {
		t.Errorf("hot host: rate burst of 1 = %d, want at least 1", got)
	}
	// The app's rate, 100/s burst 20, is now 10/s burst 2; each request
	// comes from a new client, so the client limit does not bind first.
	now := clk.Now().Add(time.Hour)
	admitted := 0
	for i := range 40 {
		admitted += burstOf(t, s, "a.test", fmt.Sprintf("k%d", i), now)
	}
	if admitted != 2 {
		t.Errorf("hot host: app burst admitted %d, want 10%% of 20", admitted)
	}
	if got := burstOf(t, s, "a.test", "k-late", now.Add(99*time.Millisecond)); got != 0 {
		t.Errorf("hot host: admitted %d 99ms later, want 0 (one per 100ms at 10/s)", got)
	}
	if got := burstOf(t, s, "a.test", "k-later", now.Add(100*time.Millisecond)); got != 1 {
		t.Errorf("hot host: admitted %d 100ms later, want 1", got)
	}

	fs.set(coolSample())
	want := []int{10, 15, 20, 25, 30, 35, 40, 45, 50} // recovery: +10% per interval
	for i, w := range want {
		s.apps.OverloadTick()
		if got := s.concurrencyOf("a"); got != w {
			t.Fatalf("cool tick %d: concurrency %d, want %d", i+1, got, w)
		}
	}
	if got := gauge(t, s, "levee_overload_factor", nil); got != 1 {
		t.Errorf("levee_overload_factor = %v after recovery, want 1", got)
	}
	if got := burstOf(t, s, "a.test", "fresh", now.Add(time.Hour)); got != 5 {
		t.Errorf("recovered client burst = %d, want 5", got)
	}
}

// TestOverloadTurnedOffByReload: turning the monitor off puts the limits
// back at once; a reload while tightened keeps the tightening.
func TestOverloadTurnedOffByReload(t *testing.T) {
	fs := &fakeSampler{s: hotCPU(0.95)} // asks 0.55
	s, _ := newScaleServer(t, true, fs)
	s.apps.OverloadTick()
	if got := s.concurrencyOf("a"); got != 27 {
		t.Fatalf("hot host: concurrency %d, want 55%% of 50", got)
	}
	if err := s.Reload(mustParse(t, fmt.Sprintf(scaledApps, true))); err != nil {
		t.Fatal(err)
	}
	if got := s.concurrencyOf("a"); got != 27 {
		t.Errorf("reload while hot: concurrency %d, want it still tightened (27)", got)
	}
	if err := s.Reload(mustParse(t, fmt.Sprintf(scaledApps, false))); err != nil {
		t.Fatal(err)
	}
	n := fs.count()
	s.apps.OverloadTick()
	if got := s.concurrencyOf("a"); got != 50 {
		t.Errorf("monitor off: concurrency %d, want 50", got)
	}
	if fs.count() != n {
		t.Errorf("a disabled monitor sampled the host")
	}
}

// TestOverloadAndStrictCompose: both factors multiply.
func TestOverloadAndStrictCompose(t *testing.T) {
	fs := &fakeSampler{s: hotCPU(0.95)}
	s, _ := newScaleServer(t, true, fs)
	s.SetUnexpected(true)
	s.apps.OverloadTick()
	in := s.Instance()
	f := in.StrictFactor * in.OverloadFactor
	if math.Abs(f-0.055) > 1e-9 {
		t.Errorf("limit factor %v, want 0.1 × 0.55", f)
	}
	if got := s.concurrencyOf("a"); got != 2 {
		t.Errorf("concurrency %d, want int(50 × 0.055)", got)
	}
}

// TestOverloadAtTheBoundary: end to end on a fake clock, the monitor's loop
// samples every interval and a tightened limit refuses the request past
// it with a 503 and its reason.
func TestOverloadAtTheBoundary(t *testing.T) {
	be := newGatedBackend(t)
	fs := &fakeSampler{s: hotCPU(1)}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyOptions(t, fmt.Sprintf(`
overload: {enabled: true, interval: 1s, min_factor: 50%%}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 4, queue: {max_len: 0}}
`, be.addr()), Options{Clock: clk, Sampler: fs})
	for fs.count() == 0 { // the loop's timer is set; each Advance is one interval
		select {
		case <-clk.TimerCreated():
		case <-time.After(10 * time.Second):
			t.Fatal("the overload loop never set its timer")
		}
		clk.Advance(time.Second)
	}
	waitFor(t, "the limit tightened to 2", func() bool { return p.srv.concurrencyOf("a") == 2 })
	results := make(chan *http.Response, 3)
	for range 2 {
		p.asyncGet("a.test", "/", results)
	}
	waitFor(t, "2 requests at the backend", func() bool { return be.inflight.Load() == 2 })
	r := p.get("a.test", "/")
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Levee-Reject") != "queue-full" || r.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d %q Retry-After %q; want 503 queue-full with Retry-After",
			r.StatusCode, r.Header.Get("Levee-Reject"), r.Header.Get("Retry-After"))
	}
	be.open()
	for range 2 {
		if r := <-results; r.StatusCode != http.StatusOK {
			t.Errorf("admitted request: %d", r.StatusCode)
		}
	}
}

// TestReloadRefusesInstanceLockChanges: the lock is taken at startup; a
// reload cannot move it.
func TestReloadRefusesInstanceLockChanges(t *testing.T) {
	s, _ := newScaleServer(t, false, nil)
	next := mustParse(t, fmt.Sprintf(scaledApps, false))
	next.Instance.Lock = "/run/levee/other.lock"
	if err := s.Reload(next); err == nil || !strings.Contains(err.Error(), "instance.lock") {
		t.Errorf("Reload = %v, want a restart-only refusal naming instance.lock", err)
	}
	next = mustParse(t, fmt.Sprintf(scaledApps, false))
	next.Instance.Unexpected = "strict"
	if err := s.Reload(next); err == nil {
		t.Errorf("Reload changing instance.unexpected succeeded")
	}
}

// TestScaledRateAllocatesNothing: a tightened rate limit costs the request
// path no allocation (the scaled limit lives on the stack).
func TestScaledRateAllocatesNothing(t *testing.T) {
	fs := &fakeSampler{s: hotCPU(0.95)}
	s, clk := newScaleServer(t, true, fs)
	s.apps.OverloadTick()
	rt, _ := s.current.Load().catalog.Lookup("a.test", "/")
	now := clk.Now()
	rt.LimitRate("k", now) // the client's entry exists from here on
	allocs := testing.AllocsPerRun(100, func() { rt.LimitRate("k", now) })
	if allocs != 0 {
		t.Errorf("LimitRate under a factor allocates %v per call, want 0", allocs)
	}
}

// BenchmarkLimitRateScaled compares the rate step as configured (factor 1)
// with a tightened one.
func BenchmarkLimitRateScaled(b *testing.B) {
	for _, cpu := range []float64{0.2, 0.95} {
		b.Run(fmt.Sprintf("cpu=%v", cpu), func(b *testing.B) {
			fs := &fakeSampler{s: hotCPU(cpu)}
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			s := New(mustParse(b, fmt.Sprintf(scaledApps, true)), Options{Clock: clk, Sampler: fs, Logger: slog.New(slog.DiscardHandler)})
			s.apps.OverloadTick()
			rt, _ := s.current.Load().catalog.Lookup("a.test", "/")
			now := clk.Now()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rt.LimitRate("k", now.Add(time.Duration(i)*time.Second))
			}
		})
	}
}
