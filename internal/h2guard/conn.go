// Package h2guard bounds what one HTTP/2 client may make a server do
// without asking for anything: resetting streams as fast as it opens them,
// or making the server reset them (stream errors), and floods of PING,
// SETTINGS, empty DATA, WINDOW_UPDATE, PRIORITY, unknown and CONTINUATION
// frames. It wraps the connection beneath the HTTP/2 server, reads the
// frame headers that pass through it both ways, and counts them (Meter);
// a connection that crosses a bound gets a GOAWAY with ENHANCE_YOUR_CALM
// and is closed, and the server reads nothing more from it. It knows
// nothing of HTTP or of the server it guards.
package h2guard

import (
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// errCodeEnhanceYourCalm is the GOAWAY's error code (RFC 9113 §7).
const errCodeEnhanceYourCalm = 0xb

const (
	// grace bounds waiting for the server to finish the frame it is
	// writing (a GOAWAY cannot cut into one) and writing the GOAWAY; a
	// server stuck longer is writing to a client that does not read.
	grace = time.Second
	// linger is how long, and lingerBytes how much, of what the client
	// still sends is read and dropped after the GOAWAY: closing with
	// unread input makes the kernel reset the connection, which can
	// destroy the GOAWAY before the client reads it.
	linger      = time.Second
	lingerBytes = 1 << 20
)

// Options are what the connections of one listener share.
type Options struct {
	Limits Limits
	Clock  Clock
	// OnClose, if set, is called once per connection the guard closes.
	OnClose func(Reason)
}

// Error is what Read returns once the client crossed a bound, and Write
// after the GOAWAY. It wraps net.ErrClosed: for the server, the
// connection is closed.
type Error struct{ Reason Reason }

func (e *Error) Error() string { return "h2guard: connection closed: " + string(e.Reason) + " flood" }

func (e *Error) Unwrap() error { return net.ErrClosed }

// Conn is a server's HTTP/2 connection under the guard. Read must be
// called from one goroutine at a time, as an HTTP/2 server does; Write
// and Close are safe for concurrent use.
type Conn struct {
	net.Conn
	opts *Options

	// The reader's alone.
	in        scanner
	meter     Meter
	delivered uint32 // the highest stream the server has been given
	readErr   error
	resets    atomic.Uint64
	// streamMark and frameMark are the streams opened and the frames
	// sent when awaitWriter last looked.
	streamMark, frameMark uint64

	sent Sent // the writer adds, the meter reads

	// wmu is held by a Write (or the GOAWAY) from start to end: out,
	// faults and wrote are its.
	wmu    sync.Mutex
	out    scanner
	faults faults
	wrote  bool
	// wentAway: the server wrote a GOAWAY of its own. The guard then
	// sends none: its last stream (the streams the server was given)
	// could be above the server's, and a GOAWAY's may never go up
	// (RFC 9113 §6.8).
	wentAway bool

	mu     sync.Mutex
	reason Reason        // the bound crossed; "" until then
	last   uint32        // the GOAWAY's last stream id
	shut   bool          // no more writes: the GOAWAY is out, or given up
	done   chan struct{} // closed with shut once reason is set
}

// Wrap puts c, whose client preface has not yet been read, under the
// guard. o is shared and must not change.
func Wrap(c net.Conn, o *Options) *Conn {
	g := &Conn{Conn: c, opts: o, in: scanner{skip: prefaceLen, prefixes: true}, out: scanner{prefixes: true}}
	g.meter.init(&o.Limits, o.Clock, &g.sent)
	return g
}

// Read reads from the client and counts the frames read. Once a bound is
// crossed, it delivers none of the bytes that crossed it: it sends the
// GOAWAY, lingers, closes, and returns an *Error.
func (c *Conn) Read(p []byte) (int, error) {
	if c.readErr != nil {
		return 0, c.readErr
	}
	c.awaitWriter()
	n, err := c.Conn.Read(p)
	for q := p[:n]; len(q) > 0; {
		m, f, ok := c.in.next(q)
		q = q[m:]
		if !ok {
			continue
		}
		if f.Type == typeRSTStream {
			c.resets.Add(1)
		}
		if r := c.meter.Frame(f); r != "" {
			c.enforce(r)
			c.readErr = &Error{Reason: r}
			return 0, c.readErr
		}
	}
	c.delivered = c.meter.MaxStream()
	return n, err
}

// behind is how many streams the client opens between two looks at
// whether the server's output keeps up (awaitWriter).
const behind = 32

// yields is how many times awaitWriter yields at most, for a server that
// has nothing to write (its handlers wait on slow backends).
const yields = 4

// awaitWriter yields to the server's other goroutines when the server
// wrote fewer frames than the client opened streams over the last behind
// streams. A server that takes stream after stream and answers few has
// its answers (resets among them) waiting for a writer that its reader and
// frame loop, passing each frame between them, keep from running; the
// guard counts the resets only once written.
func (c *Conn) awaitWriter() {
	s := c.meter.Streams()
	if s-c.streamMark < behind {
		return
	}
	w := c.sent.Frames.Load()
	for i := 0; i < yields && w-c.frameMark < s-c.streamMark; i++ {
		runtime.Gosched()
		w = c.sent.Frames.Load()
	}
	c.streamMark, c.frameMark = s, w
}

// Resets is how many of the client's streams have been reset: by the
// client (RST_STREAM frames the server has read, or is reading), or by the
// server for the client's stream errors (written). Safe for concurrent
// use.
func (c *Conn) Resets() uint64 { return c.resets.Load() }

// enforce closes the connection for r: a GOAWAY at the first frame
// boundary of the server's output, then the linger, then the close.
func (c *Conn) enforce(r Reason) {
	if c.opts.OnClose != nil {
		c.opts.OnClose(r)
	}
	c.mu.Lock()
	c.reason, c.last, c.done = r, c.delivered, make(chan struct{})
	c.mu.Unlock()
	// A Write in progress sends the GOAWAY itself when it ends (it reads
	// reason after its I/O); waiting for its lock could wait on a client
	// that does not read.
	if c.wmu.TryLock() {
		if c.out.boundary() {
			c.goAway()
		}
		c.wmu.Unlock()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		c.linger()
	case <-t.C:
		c.mu.Lock()
		c.shutLocked()
		c.mu.Unlock()
		c.Conn.Close() // also ends a Write stuck on the client
	}
}

// goAway writes the GOAWAY, unless the server wrote one; the caller
// holds wmu.
func (c *Conn) goAway() {
	c.mu.Lock()
	shut, last := c.shut, c.last
	c.mu.Unlock()
	if shut {
		return
	}
	if c.wentAway {
		c.mu.Lock()
		c.shutLocked()
		c.mu.Unlock()
		return
	}
	var b [2*headerLen + 8]byte
	c.Conn.SetWriteDeadline(time.Now().Add(grace))
	c.Conn.Write(appendGoAway(b[:0], !c.wrote, last, errCodeEnhanceYourCalm)) // on error there is nothing left to do
	c.mu.Lock()
	c.shutLocked()
	c.mu.Unlock()
}

func (c *Conn) shutLocked() {
	if !c.shut {
		c.shut = true
		close(c.done)
	}
}

// linger drops what the client still sends for a while, then closes.
func (c *Conn) linger() {
	c.Conn.SetReadDeadline(time.Now().Add(linger))
	io.CopyN(io.Discard, c.Conn, lingerBytes)
	c.Conn.Close()
}

// Write writes p and counts the frames written. Once a bound has been
// crossed, it writes only what ends the frame in progress, then the
// GOAWAY, and returns an *Error.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	shut, r := c.shut, c.reason
	c.mu.Unlock()
	if shut {
		return 0, &Error{Reason: r}
	}
	if r != "" {
		k, whole := c.out.toBoundary(p)
		n, err := c.Conn.Write(p[:k])
		c.count(p[:n])
		if err != nil || !whole {
			return n, err
		}
		c.goAway()
		return n, &Error{Reason: r}
	}
	n, err := c.Conn.Write(p)
	c.count(p[:n])
	c.mu.Lock()
	r = c.reason // the reader may have tripped while p was written
	c.mu.Unlock()
	if r != "" && c.out.boundary() {
		c.goAway()
	}
	return n, err
}

// count reads the frame headers of written bytes; the caller holds wmu.
func (c *Conn) count(p []byte) {
	if len(p) > 0 {
		c.wrote = true
	}
	for len(p) > 0 {
		n, f, ok := c.out.next(p)
		p = p[n:]
		if !ok {
			continue
		}
		c.sent.frame(f)
		if f.Type == typeGoAway {
			c.wentAway = true
		}
		if f.Type == typeRSTStream && c.faults.reset(f.Stream, f.errCode(), c.opts.Limits.InFlightResets) {
			c.sent.Resets.Add(1)
			c.resets.Add(1)
		}
	}
}

// Close closes the connection, except after a GOAWAY, when the guard
// closes it once the linger is over.
func (c *Conn) Close() error {
	c.mu.Lock()
	r := c.reason
	c.mu.Unlock()
	if r != "" {
		return nil
	}
	return c.Conn.Close()
}
