package forward

import (
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// h1Pool holds one backend address's HTTP/1.1 connections: at most max
// open (or being dialled) at once, the idle ones reused most recently used
// first (LIFO), so that those a past burst left idle are the ones that age
// out, after idleFor. A request that finds none idle and the pool full
// waits, up to wait, for one given back or closed, first come first
// served.
//
// It is levee's own, not fasthttp.HostClient's, so that who may take a
// connection, and how, is levee's to say: the exchange takes and gives
// back here (exchange.acquire, exchange.release), and a loop that forwards
// from its own poller (issue 19) can take an idle connection without
// waiting or dialling. HostClient still drives an exchange (Do: the retry of a
// request whose kept-alive connection closed under it) and lends it its
// buffers. Safe for concurrent use.
type h1Pool struct {
	dial    func() (*backendConn, error) // within the dial budget (fastDialer)
	stats   *PoolStats
	max     int
	wait    time.Duration
	idleFor time.Duration

	mu      sync.Mutex
	idle    []*backendConn // the most recently used last
	conns   int            // open, or being dialled
	waiters []*connWaiter  // oldest first
	reaper  *time.Timer    // closes the connections idle for idleFor; nil until needed
	reaping bool           // reaper is armed
	retired bool           // no request will take again: connections given back close
}

// connWaiter is a request waiting for a connection: it is handed one, or
// the right to dial one (a free place under max).
type connWaiter struct{ ch chan *backendConn } // nil: dial

// defaultMaxConns bounds a pool whose settings say nothing (a test's zero
// config.Upstream), as fasthttp's default did.
const defaultMaxConns = 512

func newH1Pool(dial func() (*backendConn, error), stats *PoolStats, max int, wait, idleFor time.Duration) *h1Pool {
	if max <= 0 {
		max = defaultMaxConns
	}
	if idleFor <= 0 {
		idleFor = fasthttp.DefaultMaxIdleConnDuration
	}
	return &h1Pool{dial: dial, stats: stats, max: max, wait: wait, idleFor: idleFor}
}

// take returns an idle connection, a new one if the pool has room, or one
// given back or made room for within p.wait (fasthttp.ErrNoFreeConns when
// none is). A dial's error is returned as it is, errDialDeferred included:
// a connection came back while the dial waited for the budget, and the
// caller takes again.
func (p *h1Pool) take() (*backendConn, error) {
	p.mu.Lock()
	if c := p.popIdleLocked(); c != nil {
		p.mu.Unlock()
		return c, nil
	}
	if p.conns < p.max {
		p.conns++
		p.mu.Unlock()
		return p.dialOne()
	}
	if p.wait <= 0 {
		p.mu.Unlock()
		return nil, fasthttp.ErrNoFreeConns
	}
	w := &connWaiter{ch: make(chan *backendConn, 1)}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()

	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case c := <-w.ch:
		return p.granted(c)
	case <-t.C:
	}
	p.mu.Lock()
	for i, v := range p.waiters {
		if v == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, fasthttp.ErrNoFreeConns
		}
	}
	p.mu.Unlock()
	// Handed something as the wait ended: it is this request's.
	return p.granted(<-w.ch)
}

// takeIdle returns an idle connection, or nil: it never waits or dials
// (an event loop's take, LoopCall). Of the affine most recently used ones
// it takes the most recent for which mine says yes (one already in the
// loop's epoll set), else the most recent.
func (p *h1Pool) takeIdle(mine func(*backendConn) bool) *backendConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	for i := n - 1; i >= max(n-affine, 0); i-- {
		if c := p.idle[i]; mine(c) {
			copy(p.idle[i:], p.idle[i+1:])
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			p.stats.idle.Add(-1)
			return c
		}
	}
	return p.popIdleLocked()
}

// affine is how many of the most recently used idle connections takeIdle
// looks through for one of the taker's: a few, so that a loop keeps
// to its own connections without the pool giving up most-recent-first.
const affine = 8

// granted is what a waiter was handed: a connection, or (nil) a place to
// dial one in.
func (p *h1Pool) granted(c *backendConn) (*backendConn, error) {
	if c != nil {
		return c, nil
	}
	return p.dialOne()
}

func (p *h1Pool) popIdleLocked() *backendConn {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	p.stats.idle.Add(-1)
	return c
}

// dialOne dials in a place already counted in p.conns; a failed dial gives
// the place back.
func (p *h1Pool) dialOne() (*backendConn, error) {
	c, err := p.dial()
	if err != nil {
		p.free()
		return nil, err
	}
	return c, nil
}

// put gives back c, after a clean exchange, to the oldest waiter or to
// the idle connections.
func (p *h1Pool) put(c *backendConn) {
	p.mu.Lock()
	if w := p.popWaiterLocked(); w != nil {
		p.mu.Unlock()
		w.ch <- c
		return
	}
	if p.retired {
		p.conns--
		p.mu.Unlock()
		c.Close()
		return
	}
	c.idleSince = time.Now()
	p.idle = append(p.idle, c)
	p.stats.idle.Add(1)
	if !p.reaping {
		p.reaping = true
		if p.reaper == nil {
			p.reaper = time.AfterFunc(p.idleFor, p.reap)
		} else {
			p.reaper.Reset(p.idleFor)
		}
	}
	p.mu.Unlock()
	c.budget.gaveBack()
}

// closeConn closes c, taken from p, and frees its place.
func (p *h1Pool) closeConn(c *backendConn) {
	c.Close()
	p.free()
}

// free gives a place back: to the oldest waiter, to dial in, or to the pool.
func (p *h1Pool) free() {
	p.mu.Lock()
	if w := p.popWaiterLocked(); w != nil {
		p.mu.Unlock()
		w.ch <- nil
		return
	}
	p.conns--
	p.mu.Unlock()
}

// popWaiterLocked takes the oldest waiter, nil if none waits.
func (p *h1Pool) popWaiterLocked() *connWaiter {
	if len(p.waiters) == 0 {
		return nil
	}
	w := p.waiters[0]
	p.waiters[0] = nil
	p.waiters = p.waiters[1:]
	return w
}

// reap closes the connections idle for idleFor (the oldest are first in
// p.idle) and arms itself for the next one to age out, if any.
func (p *h1Pool) reap() {
	now := time.Now()
	p.mu.Lock()
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].idleSince) >= p.idleFor {
		i++
	}
	old := make([]*backendConn, i)
	copy(old, p.idle[:i])
	n := copy(p.idle, p.idle[i:])
	clear(p.idle[n:])
	p.idle = p.idle[:n]
	p.stats.idle.Add(-int64(i))
	p.conns -= i
	if n > 0 {
		p.reaper.Reset(p.idleFor - now.Sub(p.idle[0].idleSince))
	} else {
		p.reaping = false
	}
	p.mu.Unlock()
	for _, c := range old {
		c.Close()
	}
}

// close closes the idle connections; those in use are closed or given
// back when their requests end, and if retire (no request will take from
// p again) given back is closed too.
func (p *h1Pool) close(retire bool) {
	p.mu.Lock()
	p.retired = p.retired || retire
	old := p.idle
	p.idle = nil
	p.stats.idle.Add(-int64(len(old)))
	p.conns -= len(old)
	if p.reaping {
		p.reaper.Stop()
		p.reaping = false
	}
	p.mu.Unlock()
	for _, c := range old {
		c.Close()
	}
}
