package health

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/testlog"
)

// wait is the deadline of every wait in these tests.
const wait = 10 * time.Second

// fakeProber fails the addresses marked failing.
type fakeProber struct {
	mu      sync.Mutex
	failing map[string]bool
	calls   map[string]int
}

func newFakeProber() *fakeProber {
	return &fakeProber{failing: map[string]bool{}, calls: map[string]int{}}
}

func (p *fakeProber) Probe(_ context.Context, addr, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[addr]++
	if p.failing[addr] {
		return errors.New("down")
	}
	return nil
}

func (p *fakeProber) fail(addr string, failing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing[addr] = failing
}

type harness struct {
	t    *testing.T
	clk  *clock.Fake
	c    *Checker
	logs *testlog.Buffer
}

// startChecker starts a Checker on a fake clock and waits for its first
// round to end.
func startChecker(t *testing.T, set *balance.Set, cfg Check, opts CheckerOptions) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(t0), logs: &testlog.Buffer{}}
	opts.Clock = h.clk
	opts.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	c, err := NewChecker(set, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	h.waitRound()
	return h
}

// waitRound waits until the checker has finished a round and set its timer.
func (h *harness) waitRound() {
	h.t.Helper()
	select {
	case <-h.clk.TimerCreated():
	case <-time.After(wait):
		h.t.Fatal("checker did not finish its round")
	}
}

// round fires the interval timer and waits for the round to end.
func (h *harness) round() {
	h.t.Helper()
	h.clk.Advance(h.c.Config().Interval)
	h.waitRound()
}

func TestCheckDefaultsAndValidate(t *testing.T) {
	want := Check{Path: "/healthz", Interval: 5 * time.Second, Timeout: time.Second, Healthy: 2, Unhealthy: 3}
	if got := (Check{}).WithDefaults(); got != want {
		t.Errorf("defaults %+v; want %+v", got, want)
	}
	err := Check{Path: "healthz", Interval: -1, Timeout: -1, Healthy: -1, Unhealthy: -2}.WithDefaults().Validate()
	for _, field := range []string{"health.path", "health.interval", "health.timeout", "health.healthy", "health.unhealthy"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v; want it to name %s", err, field)
		}
	}
	if _, err := NewChecker(nil, Check{}, CheckerOptions{Concurrency: -1}); err == nil {
		t.Error("NewChecker accepted a negative concurrency")
	}
}

func TestCheckerThresholds(t *testing.T) {
	set := newSet(2, nil)
	bad, good := set.Backend(0), set.Backend(1)
	p := newFakeProber()
	p.fail(bad.ID(), true)
	var changes []string
	var mu sync.Mutex
	h := startChecker(t, set, Check{}, CheckerOptions{Prober: p, OnChange: func(id string, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, id+map[bool]string{true: " up", false: " down"}[ok])
	}})
	// Round 1 ran at Start: 1 failure. Unhealthy = 3.
	if !bad.Healthy(t0) {
		t.Fatal("unhealthy after 1 failed probe")
	}
	h.round()
	if !bad.Healthy(t0) {
		t.Fatal("unhealthy after 2 failed probes; want 3")
	}
	h.round()
	if bad.Healthy(t0) {
		t.Fatal("still healthy after 3 failed probes")
	}
	h.round() // a 4th failure changes nothing and logs nothing
	p.fail(bad.ID(), false)
	h.round()
	if bad.Healthy(t0) {
		t.Fatal("healthy after 1 passed probe; want 2")
	}
	h.round()
	if !bad.Healthy(t0) {
		t.Fatal("still unhealthy after 2 passed probes")
	}
	if !good.Healthy(t0) {
		t.Error("the good backend was marked down")
	}
	if n, m := h.logs.Count("backend unhealthy"), h.logs.Count("backend healthy"); n != 1 || m != 1 {
		t.Errorf("%d unhealthy and %d healthy records; want 1 each (once per change)", n, m)
	}
	h.c.Stop()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(changes, ","); got != "10.0.0.1:80 down,10.0.0.1:80 up" {
		t.Errorf("OnChange saw %q", got)
	}
	if st := h.c.Status(); len(st) != 2 || !st[0].Healthy || st[0].Successes != 2 || st[0].Failures != 0 {
		t.Errorf("Status() = %+v", st)
	}
}

func TestCheckerFlapDoesNotFlip(t *testing.T) {
	set := newSet(1, nil)
	p := newFakeProber()
	h := startChecker(t, set, Check{}, CheckerOptions{Prober: p})
	for k := range 12 { // fail, fail, pass, ...: never 3 in a row
		p.fail(set.Backend(0).ID(), k%3 != 2)
		h.round()
		if !set.Backend(0).Healthy(t0) {
			t.Fatalf("round %d: flipped to unhealthy without 3 failures in a row", k)
		}
	}
}

func TestCheckerUpdateCarriesState(t *testing.T) {
	old := newSet(3, nil)
	id := old.Backend(2).ID()
	p := newFakeProber()
	p.fail(id, true)
	h := startChecker(t, old, Check{}, CheckerOptions{Prober: p})
	h.round() // 2 failures
	next := newSet(4, old)
	h.c.Update(next)
	h.round() // 3rd failure, on the new Set
	if next.Backend(2).Healthy(t0) {
		t.Fatal("the failure run did not carry over Update")
	}
	if p.calls["10.0.0.4:80"] != 1 {
		t.Errorf("new backend probed %d times; want 1", p.calls["10.0.0.4:80"])
	}
	// A Set built without prev has a fresh, healthy *Backend for the same
	// ID: the checker gives it the known verdict.
	fresh := newSet(3, nil)
	h.c.Update(fresh)
	h.round()
	if fresh.Backend(2).Healthy(t0) {
		t.Error("a new *Backend for an unhealthy ID was left healthy")
	}
	// Removed IDs are forgotten.
	h.c.Update(newSet(1, fresh))
	h.round()
	if st := h.c.Status(); len(st) != 1 {
		t.Errorf("Status() after shrinking to 1 backend: %+v", st)
	}
}

// gateProber blocks every probe until released or canceled and records the
// most probes in flight.
type gateProber struct {
	mu       sync.Mutex
	inflight int
	most     int
	deadline time.Duration // longest time to deadline seen
	noDL     bool
	started  chan struct{}
	release  chan struct{}
}

func (g *gateProber) Probe(ctx context.Context, _, _ string) error {
	g.mu.Lock()
	g.inflight++
	g.most = max(g.most, g.inflight)
	if dl, ok := ctx.Deadline(); ok {
		g.deadline = max(g.deadline, time.Until(dl))
	} else {
		g.noDL = true
	}
	g.mu.Unlock()
	g.started <- struct{}{}
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.mu.Unlock()
	}()
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestCheckerBoundsConcurrencyAndSetsDeadlines(t *testing.T) {
	set := newSet(20, nil)
	g := &gateProber{started: make(chan struct{}, 20), release: make(chan struct{})}
	c, err := NewChecker(set, Check{Timeout: time.Minute}, CheckerOptions{Clock: clock.NewFake(t0), Prober: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	deadline := time.After(wait)
	for range 8 {
		select {
		case <-g.started:
		case <-deadline:
			t.Fatal("8 probes did not start")
		}
	}
	close(g.release)
	for range 12 {
		select {
		case <-g.started:
		case <-deadline:
			t.Fatal("the remaining probes did not run")
		}
	}
	c.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most != DefaultConcurrency {
		t.Errorf("at most %d probes in flight; want %d", g.most, DefaultConcurrency)
	}
	if g.noDL || g.deadline > time.Minute || g.deadline <= 0 {
		t.Errorf("probe deadlines: missing %v, longest %v; want all ≤ the 1m timeout", g.noDL, g.deadline)
	}
}

// goroutinesBack polls until no more than n goroutines run.
func goroutinesBack(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines; want ≤ %d\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

func TestCheckerStopEndsGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	h := startChecker(t, newSet(3, nil), Check{}, CheckerOptions{Prober: newFakeProber()})
	h.round()
	if err := h.c.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	h.c.Stop()
	h.c.Stop() // idempotent
	goroutinesBack(t, before)
	if h.clk.Pending() != 0 {
		t.Errorf("%d timers pending after Stop; want 0", h.clk.Pending())
	}
}

func TestCheckerStopBeforeStart(t *testing.T) {
	c, err := NewChecker(nil, Check{}, CheckerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop() // returns at once
}

func TestCheckerContextCancelEndsGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	clk := clock.NewFake(t0)
	c, err := NewChecker(newSet(3, nil), Check{}, CheckerOptions{Clock: clk, Prober: newFakeProber()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-clk.TimerCreated():
	case <-time.After(wait):
		t.Fatal("no first round")
	}
	cancel()
	select {
	case <-c.done:
	case <-time.After(wait):
		t.Fatal("goroutine did not end on context cancel")
	}
	goroutinesBack(t, before)
	c.Stop() // after the goroutine ended: returns at once
}

func TestCheckerStopCancelsProbesAndKeepsVerdict(t *testing.T) {
	set := newSet(2, nil)
	g := &gateProber{started: make(chan struct{}, 2), release: make(chan struct{})}
	c, err := NewChecker(set, Check{Unhealthy: 1, Timeout: time.Hour}, CheckerOptions{Clock: clock.NewFake(t0), Prober: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-g.started:
		case <-time.After(wait):
			t.Fatal("probes did not start")
		}
	}
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(wait):
		t.Fatal("Stop did not cancel the hanging probes")
	}
	if !set.Backend(0).Healthy(t0) || !set.Backend(1).Healthy(t0) || len(c.Status()) != 0 {
		t.Error("a round cut short by Stop changed the verdict")
	}
}
