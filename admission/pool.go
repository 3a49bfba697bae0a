package admission

import (
	"context"
	"slices"
	"sync"
	"time"
)

// workerIdle is how long a budget's goroutine waits for its next task
// before it ends.
const workerIdle = time.Second

// pool is a Budget's goroutines, at most limit of them, each running tasks
// one after another. Reusing them, rather than starting one per task, is
// what bounds the goroutines the runtime sees and not only those counted: a
// goroutine that has given its last slot back is alive until it returns,
// and the goroutines of a busy Budget do not return.
//
// Why the count cannot exceed limit: a goroutine is busy from the moment Go
// hands it a task until it lists itself idle again, and it holds its task's
// slot all that time, because it lists itself idle before it gives the slot
// back. So when Go, holding the slot of a task not yet handed over, finds
// no idle goroutine, each counted one is busy on a slot of its own: there
// are fewer than limit, and Go may start one without waiting. (Had a
// goroutine given its slot back first, Go could take that slot while the
// goroutine was neither busy nor idle, and would have to wait for it or
// start a goroutine over limit.)
//
// A goroutine leaves the count once, under mu: in the same step as it
// leaves the idle list, after idle with no task, or before it gives its
// slot back, when its task called runtime.Goexit. Only then, between
// leaving the count and returning, can the runtime see one goroutine more
// than the count, which no code can close: nothing runs after a
// goroutine's last instruction to say that it has gone.
//
// Only the bottom of the idle list, the one idle longest, waits with a
// timer (the watcher); the others wait on their channel alone, since a
// timer in every wait cost BenchmarkBudgetFanOut an eighth more time. The
// bottom changes only when the watcher ends, since Go takes from the top,
// so the watcher, as it ends, makes the next bottom the watcher.
type pool struct {
	limit int
	idle  time.Duration // workerIdle but in tests

	mu     sync.Mutex
	listed []*worker // idle, in the order they became idle: the last takes the next task
	n      int       // goroutines counted, busy or idle: at most limit
}

// signal is what a worker is woken for.
type signal uint8

const (
	sigTask  signal = iota // w.g and w.f hold its next task
	sigWatch               // it is now the bottom of the idle list, unless taken since
)

// worker is one of a pool's goroutines.
type worker struct {
	p *pool
	// wake has room for the two sends a worker gets at most between
	// becoming idle and reading them: sigWatch, then sigTask.
	wake   chan signal
	g      *Group // the task handed over, written before sigTask
	f      func(ctx context.Context) error
	idleAt time.Time   // when it last became idle
	timer  *time.Timer // made when it is first the watcher
}

// run has f, whose slot g's Go holds, run by an idle goroutine or a new one.
func (p *pool) run(g *Group, f func(ctx context.Context) error) {
	p.mu.Lock()
	if n := len(p.listed); n > 0 {
		w := p.listed[n-1]
		p.listed[n-1] = nil
		p.listed = p.listed[:n-1]
		p.mu.Unlock()
		w.g, w.f = g, f
		w.wake <- sigTask
		return
	}
	if p.n >= p.limit {
		p.mu.Unlock()
		panic("admission: broken invariant: a slot held, no goroutine idle and as many goroutines as slots")
	}
	p.n++
	p.mu.Unlock()
	w := &worker{p: p, wake: make(chan signal, 2)}
	go w.work(g, f)
}

// work runs g's task f, then each task handed to it, until it has been
// idle for p.idle.
func (w *worker) work(g *Group, f func(ctx context.Context) error) {
	for g != nil {
		watch := w.run(g, f)
		g, f = w.next(watch)
	}
}

// run runs one task, lists w idle and gives the task's slot back; it
// reports whether w is the watcher. If the task calls runtime.Goexit, which
// ends this goroutine, w leaves the count before the slot is given back.
func (w *worker) run(g *Group, f func(ctx context.Context) error) (watch bool) {
	goexit := true
	defer func() {
		if goexit {
			w.p.leave()
			g.done()
		}
	}()
	g.call(f)
	goexit = false
	watch = w.p.park(w)
	g.done()
	return watch
}

// next waits for w's next task; it returns nil once w has been idle for
// p.idle and has left the pool.
func (w *worker) next(watch bool) (*Group, func(ctx context.Context) error) {
	for {
		var s signal
		if watch {
			var ok bool
			if s, ok = w.watch(); !ok {
				return nil, nil
			}
		} else {
			s = <-w.wake
		}
		if s == sigWatch {
			watch = w.p.bottom(w)
			continue
		}
		g, f := w.g, w.f
		w.g, w.f = nil, nil
		return g, f
	}
}

// watch waits, as the watcher, for w's next signal until w has been idle
// for p.idle; it then ends w, reporting false, unless a Go took w first.
func (w *worker) watch() (signal, bool) {
	// The deadline is read again after the timer fires: with
	// GODEBUG=asynctimerchan=1, Reset keeps a stale expiry.
	for d := time.Until(w.idleAt.Add(w.p.idle)); d > 0; d = time.Until(w.idleAt.Add(w.p.idle)) {
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		select {
		case s := <-w.wake:
			return s, true
		case <-w.timer.C:
		}
	}
	if w.p.retire(w) {
		return 0, false
	}
	return <-w.wake, true // a Go took w as it timed out: its task is on the way
}

// park lists w idle, and reports whether w is the watcher, the only one.
func (p *pool) park(w *worker) bool {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	w.idleAt = now
	p.listed = append(p.listed, w)
	return len(p.listed) == 1
}

// bottom reports whether w is the bottom of the idle list. Once there, w
// stays there while it is listed: only the bottom itself leaves from below.
func (p *pool) bottom(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.listed) > 0 && p.listed[0] == w
}

// retire takes the watcher w off the idle list and out of the count,
// making the next bottom the watcher, unless a Go has taken w first; it
// reports whether it did.
func (p *pool) retire(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.listed) == 0 || p.listed[0] != w {
		return false
	}
	p.listed = slices.Delete(p.listed, 0, 1)
	p.n--
	if len(p.listed) > 0 {
		p.listed[0].wake <- sigWatch
	}
	return true
}

// leave takes a busy goroutine that is ending out of the count.
func (p *pool) leave() {
	p.mu.Lock()
	p.n--
	p.mu.Unlock()
}

// workers returns the goroutines counted now.
func (p *pool) workers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}
