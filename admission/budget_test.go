package admission_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/admission"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// peak is a high-water mark, safe for concurrent use.
type peak struct{ now, max atomic.Int64 }

func (p *peak) add(d int64) {
	n := p.now.Add(d)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
}

func (p *peak) observe(n int64) {
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
}

// fanOut is the done-when load of issue 14: heavy concurrent requests of
// many items from one client, small requests from another, on one Budget.
type fanOut struct {
	budget             *admission.Budget
	heavy, items       int // heavy requests from client A, items each
	lightCallers, reqs int // client B: concurrent callers, requests each
	lightItems         int

	tasks      peak // task functions running (each in a goroutine the Budget started)
	goroutines peak // runtime.NumGoroutine, sampled in every task (see bound)
	// bound, if set, is the most goroutines the load may have: a sample
	// over it is counted again without the runtime's finalizer and cleanup
	// goroutines (userGoroutines).
	bound     int64
	heavyDone atomic.Int64 // A's tasks finished
	// lightWait is the most A tasks that finished between a B Go call and
	// the start of its task (reported, not asserted: it includes the time
	// B's caller waits for a CPU).
	lightWait peak
	// lightDoneAt is A's finished tasks when each B request completed.
	lightDoneAt []int64
}

func (f *fanOut) task(work func()) func(context.Context) error {
	return func(context.Context) error {
		f.tasks.add(1)
		n := int64(runtime.NumGoroutine())
		if f.bound > 0 && n > f.bound {
			n = userGoroutines()
		}
		f.goroutines.observe(n)
		work()
		f.tasks.add(-1)
		return nil
	}
}

// userGoroutines counts the goroutines as runtime.NumGoroutine does, but
// for the runtime's finalizer and cleanup goroutines: NumGoroutine counts
// them while they run a finalizer or a cleanup (of anything, of any test),
// so a GC during the load can add one for a moment that is not the
// Budget's. It stops the world (runtime.Stack): only for a sample over the
// bound.
func userGoroutines() int64 {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var n int64
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "runtime.runFinalizers(") && !strings.Contains(g, "runtime.runCleanups(") {
			n++
		}
	}
	return n
}

// dependency is the slow service the tasks call, one call at a time, in
// order: a task blocks on it as on a network call, without the wall clock.
type dependency struct{ calls chan chan struct{} }

// serve answers calls until ctx ends.
func (d dependency) serve(ctx context.Context) {
	for {
		select {
		case reply := <-d.calls:
			close(reply)
		case <-ctx.Done():
			return
		}
	}
}

func (d dependency) call(ctx context.Context) {
	reply := make(chan struct{})
	select {
	case d.calls <- reply:
		<-reply
	case <-ctx.Done():
	}
}

// run drives the load under ctx and returns when every request is done.
// A's tasks each call the slow dependency; B's do not.
func (f *fanOut) run(t testing.TB, ctx context.Context) {
	dep := dependency{calls: make(chan chan struct{})}
	depCtx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { defer close(served); dep.serve(depCtx) }()
	defer func() { stop(); <-served }()
	var wg sync.WaitGroup
	for range f.heavy {
		wg.Go(func() {
			g := f.budget.Group(ctx, "A")
			for range f.items {
				g.Go(f.task(func() { dep.call(ctx); f.heavyDone.Add(1) }))
			}
			if err := g.Wait(); err != nil {
				t.Errorf("A: Wait = %v", err)
			}
		})
	}
	var mu sync.Mutex
	for range f.lightCallers {
		wg.Go(func() {
			for range f.reqs {
				g := f.budget.Group(ctx, "B")
				for range f.lightItems {
					before := f.heavyDone.Load()
					g.Go(f.task(func() { f.lightWait.observe(f.heavyDone.Load() - before) }))
				}
				if err := g.Wait(); err != nil {
					t.Errorf("B: Wait = %v", err)
				}
				mu.Lock()
				f.lightDoneAt = append(f.lightDoneAt, f.heavyDone.Load())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestBudgetBoundsHeavyFanOutAndServesALightClient is issue 14's first
// done-when: three concurrent 20,000-item requests from client A and small
// requests from client B on a Budget of 64. At no time do more than 64 tasks
// run or more than 64 task goroutines exist (the task function is counted,
// and runtime.NumGoroutine never exceeds the test's own goroutines + 64);
// B's requests all complete while A still has most of its work to do, and
// each of B's tasks starts within a bounded number of A's completions.
func TestBudgetBoundsHeavyFanOutAndServesALightClient(t *testing.T) {
	leaktest.Check(t)
	const budget = 64
	f := &fanOut{budget: admission.NewBudget(budget), heavy: 3, items: 20000,
		lightCallers: 2, reqs: 25, lightItems: 8}
	if testing.Short() {
		f.items = 2000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The test's own goroutines: the runner and this test, the dependency,
	// A's and B's callers.
	base := runtime.NumGoroutine() + 1 + f.heavy + f.lightCallers
	f.bound = int64(base + budget)
	f.run(t, ctx)
	if ctx.Err() != nil {
		t.Fatal("the load did not finish within its deadline")
	}

	if got := f.tasks.max.Load(); got > budget {
		t.Errorf("peak running tasks = %d, want ≤ %d", got, budget)
	}
	// The Budget's goroutines run task after task and end only after an
	// idle second, which none reaches while this load has tasks to run: none
	// is exiting while another starts, so the bound is exact.
	if got := f.goroutines.max.Load(); got > int64(base+budget) {
		t.Errorf("peak goroutines = %d, want ≤ %d (base %d + budget %d)", got, base+budget, base, budget)
	}
	heavyTotal := int64(f.heavy * f.items)
	if got := f.heavyDone.Load(); got != heavyTotal {
		t.Fatalf("A finished %d tasks, want %d", got, heavyTotal)
	}
	// B's last request finished while A had most of its work left: B was
	// not made to wait for A's batches. This measure includes the Go
	// scheduler's latency in running B's callers, so it is loose; the order
	// of service, each of B's tasks started at the first completion after it
	// queued, is asserted exactly by TestLightClientIsServedAtTheNextCompletion
	// (and admit's TestPatientShareByOrderOfService).
	last := f.lightDoneAt[len(f.lightDoneAt)-1]
	if last >= heavyTotal/2 {
		t.Errorf("B's last request finished after %d of A's %d tasks, want before half", last, heavyTotal)
	}
	t.Logf("peak tasks %d, peak goroutines %d (base %d), B's longest wait %d A completions, B done after %d of %d",
		f.tasks.max.Load(), f.goroutines.max.Load(), base, f.lightWait.max.Load(), last, heavyTotal)
	if b := f.budget; b.Running() != 0 || b.Waiting() != 0 {
		t.Errorf("after the load: %d running, %d waiting", b.Running(), b.Waiting())
	}
}

// gate holds tasks until released one at a time.
type gate struct{ c chan struct{} }

func newGate() *gate     { return &gate{c: make(chan struct{})} }
func (g *gate) release() { g.c <- struct{}{} }
func (g *gate) hold(ctx context.Context) error {
	select {
	case <-g.c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestLightClientIsServedAtTheNextCompletion checks the order of service
// exactly: every slot held by A, three of A's requests and one of B's
// waiting (B's the last to come); the first of A's tasks to finish hands its
// slot to B, which holds less than its share, not to A's older waiters.
func TestLightClientIsServedAtTheNextCompletion(t *testing.T) {
	leaktest.Check(t)
	const slots = 4
	b := admission.NewBudget(slots)
	ctx, cancel := context.WithTimeout(context.Background(), leaktest.Wait)
	defer cancel()
	heavy := newGate()
	var order []string
	var mu sync.Mutex
	started := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	aGroups := make([]*admission.Group, 3)
	for i := range aGroups {
		aGroups[i] = b.Group(ctx, "A")
	}
	for range slots { // A takes every slot
		aGroups[0].Go(func(ctx context.Context) error { started("A"); return heavy.hold(ctx) })
	}
	for _, g := range aGroups { // and has three more requests waiting
		wg.Go(func() { g.Go(func(ctx context.Context) error { started("A"); return heavy.hold(ctx) }) })
	}
	leaktest.WaitFor(t, leaktest.Wait, "3 waiting", func() bool { return b.Waiting() == 3 })
	gb := b.Group(ctx, "B")
	bGo := make(chan struct{})
	go func() {
		defer close(bGo)
		gb.Go(func(context.Context) error { started("B"); return nil })
	}()
	leaktest.WaitFor(t, leaktest.Wait, "4 waiting", func() bool { return b.Waiting() == 4 })

	heavy.release() // one of A's tasks finishes
	<-bGo           // Wait comes after the last Go
	if err := gb.Wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(order[:min(5, len(order))], "") // after B, its slot may pass to A
	mu.Unlock()
	if got != "AAAAB" {
		t.Fatalf("tasks started in order %s, want AAAAB: B's task next after the first completion", got)
	}
	for range 3 + slots - 1 {
		heavy.release()
	}
	wg.Wait()
	for _, g := range aGroups {
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGoGivesUpWhenTheContextEnds(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(1)
	hold := newGate()
	ctx := context.Background()
	busy := b.Group(ctx, "A")
	busy.Go(hold.hold)

	wctx, cancel := context.WithCancel(ctx)
	g := b.Group(wctx, "B")
	ran := false
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		g.Go(func(context.Context) error { ran = true; return nil })
	}()
	leaktest.WaitFor(t, leaktest.Wait, "1 waiting", func() bool { return b.Waiting() == 1 })
	cancel()
	<-returned
	if err := g.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if ran {
		t.Error("the task ran after its context ended")
	}
	if b.Waiting() != 0 {
		t.Errorf("%d still waiting", b.Waiting())
	}
	// Later calls return at once without running anything.
	g.Go(func(context.Context) error { ran = true; return nil })
	if ran {
		t.Error("a Go after cancellation ran its task")
	}
	hold.release()
	if err := busy.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestDeadlineBoundsTheWait(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(1)
	hold := newGate()
	busy := b.Group(context.Background(), "A")
	busy.Go(hold.hold)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	g := b.Group(ctx, "B")
	g.Go(func(context.Context) error { t.Error("ran"); return nil })
	if err := g.Wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want context.DeadlineExceeded", err)
	}
	hold.release()
	_ = busy.Wait()
}

func TestFirstErrorCancelsTheGroup(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(4)
	g := b.Group(context.Background(), "A")
	first := errors.New("first")
	g.Go(func(context.Context) error { return first })
	// The failing task may still be running; a task that waits for the
	// group's context to end sees it end.
	g.Go(func(ctx context.Context) error { <-ctx.Done(); return errors.New("second") })
	leaktest.WaitFor(t, leaktest.Wait, "at most 1 running", func() bool { return b.Running() <= 1 })
	var ran atomic.Bool
	for range 100 {
		g.Go(func(context.Context) error { ran.Store(true); return nil })
	}
	if err := g.Wait(); err != first {
		t.Errorf("Wait = %v, want the first error", err)
	}
	if ran.Load() {
		t.Error("a task ran after the group failed")
	}
}

func TestPanicIsRaisedByWait(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(2)
	g := b.Group(context.Background(), "A")
	g.Go(func(context.Context) error { panic("boom") })
	g.Go(func(ctx context.Context) error { <-ctx.Done(); return nil }) // ends when the panic cancels the group
	defer func() {
		p, ok := recover().(*admission.PanicError)
		if !ok || p.Value != "boom" || !strings.Contains(p.Error(), "budget_test.go") {
			t.Fatalf("Wait panicked with %v, want a *PanicError of \"boom\" with the task's stack", p)
		}
		if b.Running() != 0 {
			t.Errorf("%d slots still held after the panic", b.Running())
		}
	}()
	_ = g.Wait()
	t.Fatal("Wait returned")
}

// TestIdleGoroutinesEnd checks the Budget's goroutines over their life:
// started as tasks need them, never more than Limit, reused from task to
// task, and ended by themselves once idle, so that an idle Budget holds no
// goroutine and needs no Close.
func TestIdleGoroutinesEnd(t *testing.T) {
	leaktest.Check(t)
	// More slots than leaktest.Wait has seconds: the goroutines must end
	// together, about a second after the last task, not a second apart.
	const slots = 16
	base := runtime.NumGoroutine()
	b := admission.NewBudget(slots)
	var most peak
	sample := func() { most.observe(int64(runtime.NumGoroutine())) }
	// Each task of the first batch waits until all have started: the Budget
	// runs slots goroutines at once.
	var started sync.WaitGroup
	started.Add(slots)
	g := b.Group(context.Background(), "A")
	for range slots {
		g.Go(func(context.Context) error { started.Done(); started.Wait(); sample(); return nil })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Many more tasks than slots, from several groups at once.
	var callers sync.WaitGroup
	for range 3 {
		callers.Go(func() {
			g := b.Group(context.Background(), "B")
			for range 500 {
				g.Go(func(context.Context) error { sample(); return nil })
			}
			if err := g.Wait(); err != nil {
				t.Error(err)
			}
		})
	}
	callers.Wait()
	if got, want := most.max.Load(), int64(base+slots+3); got > want {
		t.Errorf("peak goroutines = %d, want ≤ %d (base %d + %d slots + 3 callers)", got, want, base, slots)
	}
	if n := admission.Workers(b); n > slots {
		t.Errorf("%d goroutines counted, want ≤ %d", n, slots)
	}
	leaktest.WaitFor(t, leaktest.Wait, "the idle budget's goroutines to end", func() bool {
		return admission.Workers(b) == 0 && runtime.NumGoroutine() <= base
	})
	// An idle Budget starts them again.
	g = b.Group(context.Background(), "A")
	var ran atomic.Int64
	for range 10 {
		g.Go(func(context.Context) error { ran.Add(1); return nil })
	}
	if err := g.Wait(); err != nil || ran.Load() != 10 {
		t.Fatalf("after the goroutines ended: Wait = %v, %d of 10 tasks ran", err, ran.Load())
	}
}

// TestGoexitGivesBackItsSlotAndGoroutine checks that a task ending by
// runtime.Goexit, which ends the goroutine running it, returns nil to Wait
// and leaves neither its slot held nor its goroutine counted: on a Budget
// of 1, the next tasks find the slot free and a goroutine started for them.
func TestGoexitGivesBackItsSlotAndGoroutine(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(1)
	ctx, cancel := context.WithTimeout(context.Background(), leaktest.Wait)
	defer cancel()
	var ran atomic.Int64
	for round := range 3 {
		g := b.Group(ctx, "A")
		g.Go(func(context.Context) error { ran.Add(1); return nil }) // a goroutine idle for the next
		g.Go(func(context.Context) error { runtime.Goexit(); return errors.New("returned after Goexit") })
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: Wait = %v, want nil", round, err)
		}
		if b.Running() != 0 || admission.Workers(b) != 0 {
			t.Fatalf("round %d: after Goexit %d slots held, %d goroutines counted; want 0, 0",
				round, b.Running(), admission.Workers(b))
		}
	}
	if ran.Load() != 3 {
		t.Errorf("%d tasks ran, want 3", ran.Load())
	}
}

// TestGoroutinesEndUnderLoad runs tasks, some of which end by
// runtime.Goexit, on Budgets whose goroutines end as soon as they are idle
// or after 100µs, so that goroutines end while Go hands tasks to others and
// starts new ones: every task runs, never more goroutines are counted than
// slots, and all of them end.
func TestGoroutinesEndUnderLoad(t *testing.T) {
	for _, idle := range []time.Duration{0, 100 * time.Microsecond} {
		t.Run(idle.String(), func(t *testing.T) {
			leaktest.Check(t)
			const slots, callers, reqs, items = 8, 4, 50, 20
			b := admission.NewBudgetIdle(slots, idle)
			var ran atomic.Int64
			var most peak
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for r := range reqs {
						g := b.Group(context.Background(), string(rune('A'+c)))
						for i := range items {
							g.Go(func(context.Context) error {
								most.observe(int64(admission.Workers(b)))
								ran.Add(1)
								switch {
								case i == r%items:
									runtime.Goexit()
								case i%3 == 0:
									runtime.Gosched()
								}
								return nil
							})
						}
						if err := g.Wait(); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if got := ran.Load(); got != callers*reqs*items {
				t.Errorf("%d tasks ran, want %d", got, callers*reqs*items)
			}
			if got := most.max.Load(); got > slots {
				t.Errorf("peak goroutines counted = %d, want ≤ %d", got, slots)
			}
			if b.Running() != 0 {
				t.Errorf("%d slots still held", b.Running())
			}
			leaktest.WaitFor(t, leaktest.Wait, "no workers", func() bool { return admission.Workers(b) == 0 })
		})
	}
}

func TestGroupLimit(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(16)
	g := b.Group(context.Background(), "A", admission.WithGroupLimit(3))
	var p peak
	for range 200 {
		g.Go(func(context.Context) error { p.add(1); runtime.Gosched(); p.add(-1); return nil })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := p.max.Load(); got > 3 {
		t.Errorf("peak = %d, want ≤ 3", got)
	}
}

func TestMaxItems(t *testing.T) {
	leaktest.Check(t)
	b := admission.NewBudget(4)
	g := b.Group(context.Background(), "A", admission.WithMaxItems(10))
	err := g.Expect(11)
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Reason != admission.BatchItems || rej.RetryAfter != 0 {
		t.Fatalf("Expect(11) = %v, want a BatchItems *Rejection with no retry hint", err)
	}
	if got := err.Error(); got != "admission: rejected (batch-items)" {
		t.Errorf("Error() = %q", got)
	}
	// Refused up front: nothing changed, and a batch that fits is taken.
	if err := g.Expect(6); err != nil {
		t.Fatalf("Expect(6) = %v", err)
	}
	if err := g.Expect(5); err == nil {
		t.Fatal("Expect(5) after Expect(6) = nil, want a refusal")
	}
	var ran atomic.Int64
	for range 10 { // 6 expected, 4 more within the max
		g.Go(func(context.Context) error { ran.Add(1); return nil })
	}
	g.Go(func(context.Context) error { ran.Add(1); return nil }) // the 11th
	if err := g.Wait(); !errors.As(err, &rej) || rej.Reason != admission.BatchItems {
		t.Errorf("Wait = %v, want the BatchItems refusal", err)
	}
	if ran.Load() != 10 {
		t.Errorf("%d tasks ran, want 10", ran.Load())
	}
	if string(admission.BatchItems) != "batch-items" || string(admission.ClientShare) != "client-share" {
		t.Error("reasons are not spelled as levee spells them")
	}
}

func TestMisuseIsAProgrammingError(t *testing.T) {
	for name, f := range map[string]func(){
		"NewBudget(0)":      func() { admission.NewBudget(0) },
		"nil Budget":        func() { (*admission.Budget)(nil).Group(context.Background(), "") },
		"zero Budget":       func() { new(admission.Budget).Group(context.Background(), "") },
		"zero Group":        func() { new(admission.Group).Go(func(context.Context) error { return nil }) },
		"WithGroupLimit(0)": func() { admission.WithGroupLimit(0) },
		"WithMaxItems(0)":   func() { admission.WithMaxItems(0) },
		"Expect(-1)":        func() { admission.NewBudget(1).Group(context.Background(), "").Expect(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v, _ := recover().(string); !strings.HasPrefix(v, "admission: ") {
					t.Errorf("panic %q, want an admission: message", v)
				}
			}()
			f()
		})
	}
}

// BenchmarkBudgetFanOut runs the done-when load (three 20,000-item requests
// of A, small requests of B, Budget 64) per iteration, and reports tasks per
// second and the peak goroutines above the benchmark's own.
func BenchmarkBudgetFanOut(b *testing.B) {
	const budget = 64
	var tasks, peakG, peakT int64
	start := time.Now()
	for b.Loop() {
		f := &fanOut{budget: admission.NewBudget(budget), heavy: 3, items: 20000,
			lightCallers: 2, reqs: 25, lightItems: 8}
		base := int64(runtime.NumGoroutine() + 1 + f.heavy + f.lightCallers)
		f.run(b, context.Background())
		tasks += int64(f.heavy*f.items + f.lightCallers*f.reqs*f.lightItems)
		peakG = max(peakG, f.goroutines.max.Load()-base)
		peakT = max(peakT, f.tasks.max.Load())
	}
	b.ReportMetric(float64(tasks)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(float64(peakG), "peak-task-goroutines")
	b.ReportMetric(float64(peakT), "peak-running")
}
