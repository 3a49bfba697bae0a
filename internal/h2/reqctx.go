package h2

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"
)

// scope is what one request allocates of its own: its ResponseWriter, its
// context, its body and the handler's *http.Request, in one object. None
// of them is ever reused, so a handler (or a goroutine it started) that
// keeps one past its return finds it ended, never another request's; what
// the stream reuses (the request's header map, URL, body buffer, and the
// rest of the stream) is not reachable from here once the handler has
// returned.
type scope struct {
	w    responseWriter
	ctx  reqContext
	body requestBody // the request's Body, if it has one
	// req is the stream's request with ctx (http.Request.WithContext, the
	// one way to set it), copied here rather than allocated on its own.
	req http.Request
}

// reqContext is a request's context: the connection's values and
// deadline, cancelled (context.Canceled) when the stream ends, the
// handler returns, or the connection ends. Unlike a context.WithCancel
// child it registers nowhere: the connection cancels it itself (its
// running streams and c.streams).
type reqContext struct {
	parent context.Context

	mu     sync.Mutex
	done   chan struct{} // made on first Done, or closed at the cancel
	err    error
	watch  func() // Watch's, until it runs or Unwatch stops it
	afters []*afterFunc
}

type afterFunc struct{ f func() }

var (
	_ context.Context = (*reqContext)(nil)
	// afterFuncer is context's: context.AfterFunc on a request's context
	// registers here rather than starting a goroutine to wait.
	_ interface{ AfterFunc(func()) func() bool } = (*reqContext)(nil)
)

// closedDone is the Done of a context cancelled before anyone asked.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *reqContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value is the connection's context's, for every key: context's own key
// of the nearest cancelCtx too, where context.Cause finds no cause while
// the connection lives, and so returns Err. (A context.WithoutCancel
// between them would answer that key with nil, but its Value boxes its
// receiver: an allocation per call.)
func (c *reqContext) Value(key any) any { return c.parent.Value(key) }

func (c *reqContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			c.done = closedDone
		}
	}
	return c.done
}

func (c *reqContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel ends the context (once); what was registered to run at its end
// runs, each in a goroutine of its own, as context.AfterFunc's functions.
func (c *reqContext) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
	w, afters := c.watch, c.afters
	c.watch, c.afters = nil, nil
	c.mu.Unlock()
	if w != nil {
		go w()
	}
	for _, a := range afters {
		go a.f()
	}
}

// AfterFunc is context.AfterFunc's hook: f runs in a goroutine of its own
// once the context ends, unless stop is called first.
func (c *reqContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.afters = append(c.afters, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, a)
		if i < 0 {
			return false
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		return true
	}
}

// Watch is AfterFunc without its allocations, for one function at a
// time: f runs in a goroutine of its own once the context ends, unless
// Unwatch stops it first. It reports false, and does nothing, while
// another watch is set (use context.AfterFunc then).
func (c *reqContext) Watch(f func()) bool {
	c.mu.Lock()
	if c.watch != nil {
		c.mu.Unlock()
		return false
	}
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return true
	}
	c.watch = f
	c.mu.Unlock()
	return true
}

// Unwatch ends the watch Watch set; as a stop function of AfterFunc, it
// reports whether it stopped f from running (false: f has run, or
// started, or no watch was set).
func (c *reqContext) Unwatch() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := c.watch != nil
	c.watch = nil
	return ok
}
