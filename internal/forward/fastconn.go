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
// The connections bound each read of a response body; see backendConn.
type fastDialer struct {
	d       *net.Dialer
	timeout time.Duration // upstream.response_header_timeout
}

func newFastDialer(u config.Upstream) *fastDialer {
	return &fastDialer{d: newDialer(u), timeout: u.ResponseHeaderTimeout.D()}
}

// Dial is a fasthttp.DialFunc.
func (d *fastDialer) Dial(addr string) (net.Conn, error) {
	nc, err := d.d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &backendConn{Conn: nc, timeout: d.timeout}
	c.local = connAddr{Addr: nc.LocalAddr(), c: c}
	return c, nil
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
	timeout   time.Duration
	local     connAddr    // what LocalAddr returns
	streaming atomic.Bool // a response body is being read: each Read has its own deadline
}

func (c *backendConn) Read(p []byte) (int, error) {
	if c.streaming.Load() {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// ReadFrom keeps the TCP connection's own ReadFrom reachable: bufio.Writer
// passes a streamed request body on through it, in reads of 32 KiB rather
// than of its 4 KiB buffer (which would also change how a bandwidth limit
// chunks the body).
func (c *backendConn) ReadFrom(r io.Reader) (int64, error) {
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
