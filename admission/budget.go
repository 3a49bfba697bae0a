package admission

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
)

// Budget bounds the tasks that run at once across every Group made from it:
// one Budget for the process, shared by every request's fan-out, so that a
// thousand concurrent requests of 20,000 items each still run at most Limit
// tasks, in at most Limit goroutines. The Budget owns those goroutines: it
// starts one when a task finds none idle, reuses it for later tasks, and
// lets it end after a second with no task, so a busy Budget starts none
// per task and an idle one holds none.
//
// While tasks wait for room, each key (a client) that has work gets its fair
// share of the budget: Limit ÷ keys holding or waiting for a slot, at least
// 1. A freed slot goes to the longest-waiting task whose key holds less than
// its share; only when every waiting key holds its share does it go to the
// longest-waiting task of all, so no slot stays free while a task waits.
// Tasks of the key "" are not counted as a client and never wait for a share.
//
// A Budget is safe for concurrent use. Make one with NewBudget; the zero
// Budget and a nil *Budget are not usable (Group panics). NewBudget starts
// no goroutine, and a Budget needs no Close: its goroutines end by
// themselves once idle.
type Budget struct {
	l    *admit.Limiter
	pool pool // its limit is n of NewBudget
}

// NewBudget returns a Budget of n slots: at most n tasks of its Groups run
// at once. It panics if n < 1, which would run nothing.
func NewBudget(n int) *Budget {
	if n < 1 {
		panic(fmt.Sprintf("admission: NewBudget(%d): a budget needs at least one slot", n))
	}
	return &Budget{l: admit.NewPatient(n), pool: pool{limit: n, idle: workerIdle}}
}

// Limit returns the number of slots, n of NewBudget.
func (b *Budget) Limit() int { return b.pool.limit }

// Running returns the number of tasks running now (read without locking).
func (b *Budget) Running() int { return b.l.InFlight() }

// Waiting returns the number of Go calls blocked for a slot now (read
// without locking). It counts callers, not the items they have yet to submit.
func (b *Budget) Waiting() int { return b.l.Queued() }

// Group returns a new Group for one request's fan-out on behalf of key (the
// client: an API key, a tenant, a remote address; "" for none), whose
// tasks run under ctx. The Group's context is cancelled when a task fails,
// when ctx ends, or when Wait returns. key is kept while the group has work
// and must not be changed afterwards (an ordinary Go string is never
// changed). It panics if b is nil or was not made by NewBudget.
func (b *Budget) Group(ctx context.Context, key string, opts ...GroupOption) *Group {
	if b == nil || b.l == nil {
		panic("admission: Group on a nil or zero Budget; make one with NewBudget")
	}
	gctx, cancel := context.WithCancelCause(ctx)
	g := &Group{b: b, ctx: gctx, parent: ctx, cancel: cancel, ticket: admit.Ticket{Client: key}}
	for _, o := range opts {
		o.apply(g)
	}
	return g
}

// A GroupOption configures a Group (Budget.Group).
type GroupOption struct{ apply func(*Group) }

// WithGroupLimit caps the group's own tasks: at most n of them run at once,
// within the budget and its fair share. Go blocks for it as for the budget.
// It panics if n < 1.
func WithGroupLimit(n int) GroupOption {
	if n < 1 {
		panic(fmt.Sprintf("admission: WithGroupLimit(%d): a group needs at least one slot", n))
	}
	return GroupOption{func(g *Group) { g.sem = make(chan struct{}, n) }}
}

// WithMaxItems bounds the group's tasks over its life: at most n calls of Go
// run a task. Expect refuses a batch that would go beyond n up front, before
// any of it runs; a Go call beyond n does not run its task and fails the
// group. Both refuse with a *Rejection of Reason BatchItems and RetryAfter 0.
// It panics if n < 1.
func WithMaxItems(n int) GroupOption {
	if n < 1 {
		panic(fmt.Sprintf("admission: WithMaxItems(%d): a group needs at least one item", n))
	}
	return GroupOption{func(g *Group) { g.maxItems = n }}
}

// errBatchItems is the refusal of WithMaxItems, shared: it allocates nothing.
var errBatchItems = &Rejection{Reason: BatchItems}

// Group is one request's fan-out under a Budget, in the manner of
// golang.org/x/sync/errgroup.Group: Go starts tasks, Wait waits for them
// and returns the first error. Unlike errgroup, Go blocks until its task
// may run, so a group never holds a goroutine for a task that waits.
//
// Go and Expect may be called from several goroutines at once; Wait once,
// after the last Go. Make a Group with Budget.Group; the zero Group is not
// usable (Go panics).
type Group struct {
	b      *Budget
	ctx    context.Context
	parent context.Context // the request's: once it ends, no task starts
	cancel context.CancelCauseFunc
	ticket admit.Ticket
	sem    chan struct{} // WithGroupLimit; nil: no cap of its own
	wg     sync.WaitGroup

	mu       sync.Mutex
	maxItems int // WithMaxItems; 0: no bound
	claimed  int // items started or expected
	expected int // items expected and not yet started
	err      error
	panicked *PanicError
}

// Expect declares that the caller is about to call Go n more times (n ≥ 0;
// it panics if n < 0). With WithMaxItems(max), it returns a *Rejection
// (BatchItems) if the group's tasks so far and those expected would exceed
// max, and then changes nothing, so a handler can refuse the whole batch
// before running any of it; the group is not failed by it. Without a max it
// returns nil. Expect never blocks.
func (g *Group) Expect(n int) error {
	if n < 0 {
		panic(fmt.Sprintf("admission: Expect(%d): a negative count", n))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxItems > 0 && g.claimed+n > g.maxItems {
		return errBatchItems
	}
	g.claimed += n
	g.expected += n
	return nil
}

// claim counts one Go call against the group's max items.
func (g *Group) claim() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.expected > 0:
		g.expected--
	case g.maxItems > 0 && g.claimed >= g.maxItems:
		return errBatchItems
	default:
		g.claimed++
	}
	return nil
}

// Go runs f, in one of the budget's goroutines, once it may run: when the
// group is under its WithGroupLimit cap, the budget has a free slot and the
// group's key is within its fair share (or no key under its share waits).
// It blocks the caller until then, so no goroutine exists for a task that
// waits, and returns once f is handed over, without waiting for a goroutine.
//
// Go does not run f, and returns at once or as soon as it knows, when the
// group's context ends (a task of the group failed, the context given to
// Group ended, or Wait has returned), recording ctx's error as the group's
// error if it is the first; or when f would go beyond WithMaxItems (the
// group fails with a *Rejection, BatchItems). The first error cancels the
// group's context, so the rest of a fan-out loop returns at once.
//
// f gets the group's context. It must not itself call Go on a Group of the
// same Budget and wait for that task: if every slot were held by such
// tasks, none could run. Fan out from the request, not from its tasks.
// A panic in f is recovered, its slot given back, the group cancelled, and
// re-raised by Wait (see PanicError).
func (g *Group) Go(f func(ctx context.Context) error) {
	if g.b == nil {
		panic("admission: Go on a zero Group; make one with Budget.Group")
	}
	if err := g.claim(); err != nil {
		g.fail(err)
		return
	}
	if g.sem != nil {
		select {
		case g.sem <- struct{}{}:
		case <-g.ctx.Done():
			g.fail(g.ctx.Err())
			return
		}
	}
	if err := g.b.l.AcquireFor(g.ctx, g.ticket); err != nil {
		// A patient limiter refuses nothing: err is the context's.
		if g.sem != nil {
			<-g.sem
		}
		g.fail(err)
		return
	}
	g.wg.Add(1)
	g.b.pool.run(g, f)
}

// call runs one task, recording its error or recovering its panic. A
// task whose request's context has ended (its client gone, or its
// deadline, as Gate.Wrap sets it from Levee-Deadline, passed) is never
// started: the group fails with the context's error. (A task that got
// its slot runs though a sibling failed the group, as in errgroup.)
func (g *Group) call(f func(ctx context.Context) error) {
	defer func() {
		if v := recover(); v != nil {
			g.panic(&PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	if err := ended(g.parent); err != nil {
		g.fail(err)
		return
	}
	if err := f(g.ctx); err != nil {
		g.fail(err)
	}
}

// done gives back the slot Go took for a task that has ended, then counts
// it done for Wait, so that Wait returns with the task's slot free.
func (g *Group) done() {
	g.b.l.ReleaseFor(g.ticket)
	if g.sem != nil {
		<-g.sem
	}
	g.wg.Done()
}

// fail records err as the group's error if it is the first, and cancels the group.
func (g *Group) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.cancel(err)
}

func (g *Group) panic(p *PanicError) {
	g.mu.Lock()
	if g.panicked == nil {
		g.panicked = p
	}
	g.mu.Unlock()
	g.cancel(p)
}

// Wait blocks until every task started by Go has returned, then cancels the
// group's context and returns the group's first error: a task's, a
// context's (a Go that gave up), or a *Rejection; nil if there was none.
// If a task panicked, Wait panics with a *PanicError holding the first
// panic's value and stack, after every other task has returned, so that
// the panic surfaces on the request's goroutine (where net/http or a
// middleware recovers it) with the budget's slots all given back. A task
// that ends by runtime.Goexit counts as one that returned nil.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel(context.Canceled)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.panicked != nil {
		panic(g.panicked)
	}
	return g.err
}

// PanicError is what Wait panics with when a task panicked: the value the
// task panicked with and the task goroutine's stack at the panic.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns the panic value and the task's stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("admission: task panicked: %v\n\n%s", p.Value, p.Stack)
}

// Unwrap returns the panic value if it is an error, else nil.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// ended is ctx's error, or context.DeadlineExceeded once its deadline has
// passed though its timer has not fired yet.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
