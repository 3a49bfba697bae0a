package forward

import (
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
)

// fastDialer dials one backend's connections for its fasthttp.HostClient.
// The connections bound each read of a response body and count themselves
// into the backend's idle pool; see backendConn.
type fastDialer struct {
	d       *net.Dialer
	idle    *idleConns
	timeout time.Duration // upstream.response_header_timeout
}

func newFastDialer(u config.Upstream) *fastDialer {
	return &fastDialer{d: newDialer(u), idle: &idleConns{max: int64(u.MaxIdlePerBackend)},
		timeout: u.ResponseHeaderTimeout.D()}
}

// Dial is a fasthttp.DialFunc.
func (d *fastDialer) Dial(addr string) (net.Conn, error) {
	nc, err := d.d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &backendConn{Conn: nc, idle: d.idle, timeout: d.timeout}
	c.local = connAddr{Addr: nc.LocalAddr(), c: c}
	return c, nil
}

// idleConns counts one backend's idle connections against
// upstream.max_idle_per_backend. Safe for concurrent use.
//
// fasthttp has no such cap: every connection it gets back stays in its pool
// until upstream.idle_timeout. So levee decides, when a response body ends,
// whether its connection goes back at all (releaseBody), and a connection
// leaves the count when it is next written to (fasthttp took it from the
// pool for a request) or closed.
type idleConns struct {
	max int64
	n   atomic.Int64 // connections given back and not yet reused or closed
}

// reserve takes a place in the idle pool, false if it is full.
func (p *idleConns) reserve() bool {
	if p.n.Add(1) > p.max {
		p.n.Add(-1)
		return false
	}
	return true
}

// backendConn is a connection to a backend on the fasthttp engine.
//
// HostClient.ReadTimeout (response_header_timeout) sets one deadline for
// the response header, from the end of the request as in net/http. Once
// the body streams (streamBody), each Read sets its own deadline instead,
// timeout from its start: a body may take as long as it likes as long as
// no read waits longer than timeout for a byte. A deadline update is a
// runtime timer update (no system call, no allocation). fasthttp sets the
// read deadline again before the next response's header, which ends the
// per-read mode.
//
// fasthttp hands it to one request at a time. Its flags are atomic anyway,
// so as not to rest on which goroutines fasthttp reads, pools and closes it
// on; a load costs what a plain one does on amd64 and arm64.
type backendConn struct {
	net.Conn
	idle      *idleConns
	timeout   time.Duration
	local     connAddr    // what LocalAddr returns
	streaming atomic.Bool // a response body is being read: each Read has its own deadline
	pooled    atomic.Bool // counted in idle
}

func (c *backendConn) Read(p []byte) (int, error) {
	if c.streaming.Load() {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

func (c *backendConn) Write(p []byte) (int, error) {
	c.unpool() // fasthttp took it from the pool for a request
	return c.Conn.Write(p)
}

func (c *backendConn) Close() error {
	c.unpool()
	return c.Conn.Close()
}

// ReadFrom keeps the TCP connection's own ReadFrom reachable: bufio.Writer
// passes a streamed request body on through it, in reads of 32 KiB rather
// than of its 4 KiB buffer (which would also change how a bandwidth limit
// chunks the body).
func (c *backendConn) ReadFrom(r io.Reader) (int64, error) {
	c.unpool()
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *backendConn) SetReadDeadline(t time.Time) error {
	c.streaming.Store(false)
	return c.Conn.SetReadDeadline(t)
}

func (c *backendConn) SetDeadline(t time.Time) error {
	c.streaming.Store(false)
	return c.Conn.SetDeadline(t)
}

// LocalAddr returns the connection's local address, which fasthttp keeps
// in the Response read from it: connOf finds the connection back from it.
func (c *backendConn) LocalAddr() net.Addr { return &c.local }

// streamBody switches to bounding each body read by timeout.
func (c *backendConn) streamBody() { c.streaming.Store(true) }

func (c *backendConn) unpool() {
	if c.pooled.Load() && c.pooled.CompareAndSwap(true, false) {
		c.idle.n.Add(-1)
	}
}

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
// whole), which gives its connection back to fasthttp: to the idle pool if
// the body was read to its end and the pool has room, else closed. A
// response without a body stream (HEAD, 204, 304) gave its connection back
// inside Do, uncounted; releaseBody does nothing for it.
func releaseBody(resp *fasthttp.Response, err error) {
	bs := resp.BodyStream()
	if bs == nil {
		return
	}
	if c := connOf(resp); c != nil && err == nil && !resp.ConnectionClose() {
		if c.idle.reserve() {
			// Counted before fasthttp has it back, so that whoever reuses
			// it next counts it out. If fasthttp closes it instead (the body
			// was not read to its end), Close counts it out.
			c.pooled.Store(true)
		} else {
			resp.SetConnectionClose() // fasthttp closes rather than pools it
		}
	}
	if rc, ok := bs.(fasthttp.ReadCloserWithError); ok {
		rc.CloseWithError(err)
	} else {
		resp.CloseBodyStream()
	}
}
