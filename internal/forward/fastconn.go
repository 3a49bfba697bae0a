package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/sockio"
)

// fastDialer dials one backend's connections: its HTTP/1.1 pool's
// (h1Pool), its HTTP/2 leg's and upgrades'. The connections bound each read
// of a response body and count themselves in the pool's stats; see
// backendConn.
type fastDialer struct {
	d       *net.Dialer
	stats   *PoolStats
	budget  *dialBudget   // upstream.dial_rate
	timeout time.Duration // upstream.response_header_timeout: each body read, and the wait for a dial
}

func newFastDialer(u config.Upstream) *fastDialer {
	return &fastDialer{d: newDialer(u), stats: &PoolStats{reuse: u.MaxIdlePerBackend > 0},
		budget:  newDialBudget(u.DialRate.PerSecond(), u.MaxConnsPerBackend),
		timeout: u.ResponseHeaderTimeout.D()}
}

// dialPooled is the HTTP/1.1 pool's dial, within the dial budget (a wait
// for it ends early, errDialDeferred, when a connection comes back).
func (d *fastDialer) dialPooled(addr string) (*backendConn, error) { return d.dial(addr, true) }

// dialOwn dials a connection of its own (an upgrade's), within the budget.
func (d *fastDialer) dialOwn(addr string) (*backendConn, error) { return d.dial(addr, false) }

func (d *fastDialer) dial(addr string, pooled bool) (*backendConn, error) {
	waited, err := d.budget.await(d.d.Timeout, pooled)
	if waited {
		d.stats.dialWaits.Add(1)
	}
	if err != nil {
		return nil, err
	}
	d.stats.dials.Add(1)
	nc, err := d.d.Dial("tcp", addr)
	if err != nil {
		d.stats.dialErrors.Add(1)
		d.budget.refund()
		return nil, err
	}
	d.stats.open.Add(1)
	c := &backendConn{Conn: nc, stats: d.stats, budget: d.budget, timeout: d.timeout}
	c.local = connAddr{Addr: nc.LocalAddr(), c: c}
	c.fd = -1
	if c.io.Init(nc) {
		c.peekFD = c.peekFunc
		c.io.RawConn().Control(func(fd uintptr) { c.fd = int(fd) })
	}
	return c, nil
}

// PoolStats count one backend pool's connections. Safe for concurrent use.
//
// A connection that ends an exchange cleanly always goes back to the pool
// (exchange.release): the idle pool is never smaller than the connections
// in use, so a burst past any idle cap never closes connections only to
// dial them again (each close a TIME_WAIT socket; at a few thousand a
// second the ephemeral ports to one backend run out). A connection closes
// when it breaks, when the backend asks, or when it has been idle for
// upstream.idle_timeout; the pool reuses the most recently used first
// (LIFO), so the connections a past burst left idle are those that age
// out. With max_idle_per_backend 0, no connection is reused.
type PoolStats struct {
	reuse      bool
	idle       atomic.Int64 // given back and not yet reused or closed
	open       atomic.Int64 // dialled and not yet closed
	dials      atomic.Uint64
	dialErrors atomic.Uint64
	dialWaits  atomic.Uint64 // dials that waited for upstream.dial_rate
	exchanges  atomic.Uint64 // requests written on the pool's connections
}

// Counts returns the stats now: connections open (in use and idle) and
// idle, and since the pool was made, dials, failed dials and exchanges.
func (s *PoolStats) Counts() observe.ConnCounts {
	return observe.ConnCounts{Open: s.open.Load(), Idle: s.idle.Load(), Dials: s.dials.Load(),
		DialErrors: s.dialErrors.Load(), DialWaits: s.dialWaits.Load(), Exchanges: s.exchanges.Load()}
}

// backendConn is a connection to a backend on the fasthttp engine.
//
// HostClient.ReadTimeout (response_header_timeout) sets one deadline for
// the response header, from the end of the request as in net/http. Once
// the body streams (streamBody), each Read sets its own deadline instead,
// timeout from its start: a body may take as long as it likes as long as
// no read waits longer than timeout for a byte. A deadline update is a
// runtime timer update (no system call, no allocation). The exchange sets
// the read deadline again before the next response's header, which ends
// the per-read mode.
//
// The pool (h1Pool) hands it to one request at a time. Its flags are
// atomic anyway, so as not to rest on which goroutines read and close it
// (a body may be closed from the client's side); a load costs what a plain
// one does on amd64 and arm64.
type backendConn struct {
	net.Conn
	stats     *PoolStats
	budget    *dialBudget
	timeout   time.Duration
	local     connAddr    // what LocalAddr returns
	streaming atomic.Bool // a response body is being read: each Read has its own deadline
	closed    atomic.Bool

	// The exchange's state (see exchange): only the request that holds
	// the connection touches these; the pool's lock orders the holders.
	used      bool                  // an exchange ended on it: it came back from the pool
	idleSince time.Time             // when it went back to the pool (guarded by h1Pool.mu)
	writes    int                   // writes of the current request
	early     bool                  // response bytes were readable while the request was written
	peekFD    func(fd uintptr) bool // peekFunc, made once
	peeked    peekState

	io sockio.Conn // the socket's reads and writes
	fd int         // the socket's descriptor, for an event loop (-1: none)
	// reg is its place in an event loop's epoll set (LoopCall).
	reg h1loop.Registration
	// pre is what an event loop read of the response before it handed
	// the exchange on (LoopCall): Read returns it first.
	pre     []byte
	expired bool   // the loop's wait for the body timed out: the next socket read fails
	hold    bool   // the next Write is held (holdLastWrite)
	pending []byte // the held write (the caller's buffer, kept until the read)

	// A request's context on the net/http engine (watch): its end aborts
	// the connection's reads and writes, and the connection is closed.
	stop    func() bool // ends the watch; nil: none
	watcher watcher     // or ends it, when the context is one; nil: none
	abortFn func()      // abort, made once
	aborted atomic.Bool
}

// watcher is a context that runs one function at its end, as
// context.AfterFunc does, without AfterFunc's allocations (five per
// request on a context.WithCancel child): package h2's request contexts.
// Watch reports false, and does nothing, while another watch is set;
// Unwatch is AfterFunc's stop.
type watcher interface {
	Watch(f func()) bool
	Unwatch() bool
}

// aLongTimeAgo is a deadline that has passed: it fails a blocked read or
// write at once.
var aLongTimeAgo = time.Unix(1, 0)

// watch aborts the connection's reads and writes when ctx ends, until
// unwatch.
func (c *backendConn) watch(ctx context.Context) {
	if c.abortFn == nil {
		c.abortFn = c.abort
	}
	if w, ok := ctx.(watcher); ok && w.Watch(c.abortFn) {
		c.watcher = w
		return
	}
	c.stop = context.AfterFunc(ctx, c.abortFn)
}

// unwatch ends a watch, false if it fired: the connection was aborted (or
// is being) and must be closed, never pooled.
func (c *backendConn) unwatch() bool {
	var stopped bool
	switch {
	case c.watcher != nil:
		stopped = c.watcher.Unwatch()
		c.watcher = nil
	case c.stop != nil:
		stopped = c.stop()
		c.stop = nil
	default:
		return !c.aborted.Load()
	}
	return stopped && !c.aborted.Load()
}

func (c *backendConn) abort() {
	c.aborted.Store(true) // before the deadline: see keepAborted
	c.Conn.SetDeadline(aLongTimeAgo)
}

// keepAborted sets the passed deadline again after a deadline was set: an
// abort between the two would otherwise be undone.
func (c *backendConn) keepAborted() error {
	if c.aborted.Load() {
		c.Conn.SetDeadline(aLongTimeAgo)
		return errAborted
	}
	return nil
}

// errAborted is a read or write on a connection whose request ended.
var errAborted = errors.New("forward: the request ended (its client reset or left)")

// peekState is what a look at a connection's socket found.
type peekState uint8

const (
	peekEmpty  peekState = iota // nothing to read
	peekData                    // bytes to read
	peekClosed                  // the backend closed (or the socket failed)
)

// peek looks, without blocking or consuming anything, at whether the
// socket has bytes or the backend's close to read: one recvfrom with
// MSG_PEEK|MSG_DONTWAIT.
func (c *backendConn) peek() peekState {
	raw := c.io.RawConn()
	if raw == nil {
		return peekEmpty
	}
	if err := raw.Read(c.peekFD); err != nil {
		return peekClosed
	}
	return c.peeked
}

func (c *backendConn) peekFunc(fd uintptr) bool {
	c.peeked = peekSocket(fd)
	return true // never wait for readability
}

// startRequest marks the start of a request's writes.
func (c *backendConn) startRequest() { c.writes, c.early = 0, false }

// wrote notes one write of the request: from the second on, response
// bytes already readable mean the backend answered before it had the
// whole request, and may read the rest as a request of its own.
func (c *backendConn) wrote() {
	if c.writes > 0 && !c.early && c.peek() == peekData {
		c.early = true
	}
	c.writes++
}

// holdLastWrite holds the next Write, if it is the request's only one, for
// the next Read, which sends it and then waits for the response without
// trying the socket first (sockio.Conn.SendRead). acquire looked at the
// socket just before, so nothing the backend sent is there to be missed;
// an answer can come only after the request. The caller must keep the
// written buffer unchanged until that Read, and write nothing else before
// it.
func (c *backendConn) holdLastWrite() {
	if c.io.RawConn() != nil {
		c.hold = true
	}
}

// dropHeld forgets a held write the connection will never send (it is
// being closed), so that its buffer is not kept.
func (c *backendConn) dropHeld() { c.hold, c.pending = false, nil }

func (c *backendConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		if c.pre = c.pre[n:]; len(c.pre) == 0 {
			c.pre = nil
		}
		return n, nil
	}
	if c.expired {
		return 0, os.ErrDeadlineExceeded
	}
	if c.pending != nil {
		held := c.pending
		c.pending = nil
		return c.io.SendRead(held, p)
	}
	if c.streaming.Load() {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, err
		}
		if err := c.keepAborted(); err != nil {
			return 0, err
		}
	}
	return c.io.Read(p)
}

func (c *backendConn) Write(p []byte) (int, error) {
	// Only a request's one write is held: once bytes have gone out, an
	// early answer may already be on the socket, and the wait in sendRead
	// would not see it (the readiness it reset came before).
	hold := c.hold && c.writes == 0 && c.pending == nil && len(p) > 0
	c.hold = false
	c.wrote()
	if hold {
		c.pending = p
		return len(p), nil
	}
	if c.pending != nil { // never, by holdLastWrite's contract; kept in order if it were
		rest := c.pending
		c.pending = nil
		if _, err := c.io.Write(rest); err != nil {
			return 0, err
		}
	}
	return c.io.Write(p)
}

func (c *backendConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.stats.open.Add(-1)
		c.reg.Drop(c.fd) // out of a loop's epoll set first (Registration.Drop)
	}
	return c.Conn.Close()
}

// ReadFrom copies as the TCP connection's own ReadFrom does (bufio.Writer
// passes a streamed request body on through it), in reads of 32 KiB rather
// than of bufio's 4 KiB (which would also change how a bandwidth limit
// chunks the body), each through Write, which looks for an early response.
func (c *backendConn) ReadFrom(r io.Reader) (int64, error) {
	c.wrote()
	return io.Copy(struct{ io.Writer }{c}, r)
}

func (c *backendConn) SetReadDeadline(t time.Time) error {
	c.streaming.Store(false)
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.keepAborted()
}

func (c *backendConn) SetDeadline(t time.Time) error {
	c.streaming.Store(false)
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	return c.keepAborted()
}

// LocalAddr returns the connection's local address, which fasthttp keeps
// in the Response read from it: connOf finds the connection back from it.
func (c *backendConn) LocalAddr() net.Addr { return &c.local }

// streamBody switches to bounding each body read by timeout.
func (c *backendConn) streamBody() { c.streaming.Store(true) }

// connAddr is a backendConn's local address, pointing back to it.
type connAddr struct {
	net.Addr
	c *backendConn
}

// connOf returns the connection resp was read from (after a successful
// Do), or nil if it was not dialled by NewFastClient.
func connOf(resp *fasthttp.Response) *backendConn {
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		return a.c
	}
	return nil
}

// releaseBody closes resp's body stream, cut off by err (nil: passed on
// whole). The exchange gave the connection back when the body ended, if
// it was clean (exchange.release); a body closed before its end closes it.
func releaseBody(resp *fasthttp.Response, err error) {
	bs := resp.BodyStream()
	if bs == nil {
		return
	}
	if rc, ok := bs.(fasthttp.ReadCloserWithError); ok {
		rc.CloseWithError(err)
	} else {
		resp.CloseBodyStream()
	}
}
