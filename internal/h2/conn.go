package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
)

const (
	// The windows the server grants: each stream and the connection as a
	// whole may have this much request body buffered, unread by handlers.
	streamRecvWindow = 1 << 20
	connRecvWindow   = 1 << 20
	// flushAt is how many buffered bytes are written even with another
	// writer waiting for the lock.
	flushAt = 64 << 10
	// linger is how long, and lingerBytes how much, of what a client
	// still sends is read and dropped after a GOAWAY for an error, so that
	// closing with unread input does not reset the connection (which can
	// destroy the GOAWAY before the client reads it).
	linger      = time.Second
	lingerBytes = 1 << 20
	// maxPending is how many streams, times the stream limit, may wait
	// for a handler goroutine (their handlers still run after the client
	// reset them) before the connection is closed.
	maxPending = 4
	// readBufSize is the reader's buffer: small reads, so that h2guard,
	// which counts the frames both ways at each read, sees the answers
	// to what it let through before it lets much more through.
	readBufSize = 4 << 10
	// keepWriteBuf is the largest write buffer kept after a flush.
	keepWriteBuf = 32 << 10
)

// conn is one HTTP/2 connection.
type conn struct {
	srv      *Server
	nc       net.Conn
	ctx      context.Context
	cancel   context.CancelFunc
	remote   string
	tls      *tls.ConnectionState // of a *tls.Conn served directly; nil else
	handler  http.Handler
	maxStrms uint32
	maxHList uint32

	// The reader's alone.
	br        *bufio.Reader
	hdec      *hpack.Decoder
	hb        headerBlock
	canon     map[string]string // lowercase names met that need an allocation to canonicalize
	lazyFlush atomic.Bool       // the reader left bytes in wbuf, to flush before it blocks
	scratch   []byte            // a frame's payload larger than br's buffer

	mu          sync.Mutex
	streams     map[uint32]*stream
	maxClientID uint32 // the highest stream id the client opened
	handlers    int    // handler goroutines running
	pending     []*stream
	sendWindow  int64 // the connection's send window
	peerWindow  int64 // SETTINGS_INITIAL_WINDOW_SIZE of the client
	peerFrame   int   // SETTINGS_MAX_FRAME_SIZE of the client
	recvAvail   int64 // connection window the client may still use
	recvUnsent  int64 // consumed, not yet given back
	blocked     []*stream
	goingAway   bool   // a GOAWAY is out (or going): no new streams
	goAwayLast  uint32 // its last stream id
	closing     bool   // graceful: close once no stream is left
	closed      bool   // the reader has ended
	unacked     int    // our SETTINGS not yet acknowledged
	lastActive  int64  // unix nanos when the last stream ended
	idleTimer   *time.Timer
	closeOnce   sync.Once

	wmu       sync.Mutex
	wbuf      []byte
	waiting   atomic.Int32
	werr      error
	wdeadline bool // a write deadline is set on nc

	// running lists the streams whose handler runs (linked by runNext):
	// abort cancels their requests' contexts, as it does those of the
	// streams still open.
	running *stream
	// base is a ConnContext's context that can end (nil: none), and
	// stopParent ends its watch (cancelRunning).
	base       context.Context
	stopParent func() bool

	hwg    sync.WaitGroup // handler goroutines and the shutdown's writer
	spares spares         // goroutines kept for the next handler (spare.go)
}

// headerBlock is a header block being read: its HEADERS frame's facts
// and the fields decoded so far.
type headerBlock struct {
	active     bool
	stream     uint32
	endStream  bool
	selfDep    bool // a priority that names its own stream
	fields     []hpack.HeaderField
	remain     uint32 // header list bytes still allowed
	truncated  bool   // over the header list size: 431
	invalid    bool   // a malformed field: PROTOCOL_ERROR
	sawRegular bool
	bytes      int
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, handler: s.Handler, maxStrms: s.maxStreams(), maxHList: s.maxHeaderList(),
		streams: map[uint32]*stream{}, sendWindow: defaultWindow, peerWindow: defaultWindow, peerFrame: maxFrameSize,
		recvAvail: defaultWindow}
	if c.handler == nil {
		c.handler = http.DefaultServeMux
	}
	if ra := nc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		cs := tc.ConnectionState()
		c.tls = &cs
	}
	// net/http's keys: httputil.ReverseProxy aborts a broken response
	// with a panic (http.ErrAbortHandler) only under a server it sees.
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.stub())
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	if s.ConnContext != nil {
		ctx = s.ConnContext(ctx, nc)
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	if ctx.Done() != nil {
		// The requests' contexts are not its children (reqContext): its
		// end ends them here.
		c.base, c.stopParent = ctx, context.AfterFunc(ctx, c.cancelRunning)
	}
	// The server's preface, first in the buffer whatever follows (a
	// Shutdown's GOAWAY): its SETTINGS, and the connection window opened
	// to connRecvWindow.
	b := appendFrameHeader(nil, 3*6, frameSettings, 0, 0)
	b = appendSetting(b, settingMaxConcurrentStreams, c.maxStrms)
	b = appendSetting(b, settingInitialWindowSize, streamRecvWindow)
	b = appendSetting(b, settingMaxHeaderListSize, c.maxHList)
	c.wbuf = appendWindowUpdate(b, 0, connRecvWindow-defaultWindow)
	c.unacked, c.recvAvail = 1, connRecvWindow
	return c
}

// serve reads the connection's frames until it ends.
func (c *conn) serve() {
	defer c.finish()
	c.lockWrite() // the server's preface is in the buffer (newConn)
	if c.unlockWrite(time.Time{}) != nil {
		return
	}

	if d := c.srv.ReadHeaderTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	c.br = bufio.NewReaderSize(c.nc, readBufSize)
	pre, err := c.br.Peek(len(clientPreface))
	if err != nil || string(pre) != clientPreface {
		return
	}
	c.br.Discard(len(clientPreface))
	c.hdec = hpack.NewDecoder(4096, c.emit)
	c.hdec.SetMaxStringLength(int(c.maxHList))

	first := true
	for {
		if c.br.Buffered() < frameHeaderLen && c.flushLazy() != nil {
			return
		}
		hdr, err := c.br.Peek(frameHeaderLen)
		if err != nil {
			if c.closingIdle(err) {
				c.lingerClose()
			}
			return
		}
		fh := parseFrameHeader(hdr)
		if first {
			if fh.typ != frameSettings || fh.flags&flagAck != 0 {
				c.connError(connError{ErrCodeProtocol, "first frame not SETTINGS"})
				return
			}
		}
		if fh.length > maxFrameSize {
			c.connError(connError{ErrCodeFrameSize, "frame too large"})
			return
		}
		c.br.Discard(frameHeaderLen)
		n := int(fh.length)
		if c.br.Buffered() < n && c.flushLazy() != nil {
			return
		}
		payload, err := readPayload(c.br, n, &c.scratch)
		if err != nil {
			return
		}
		err = c.frame(fh, payload)
		if n <= c.br.Size() {
			c.br.Discard(n)
		}
		if first {
			first = false
			if c.srv.ReadHeaderTimeout > 0 {
				c.nc.SetReadDeadline(time.Time{})
			}
			c.startIdleTimer()
		}
		if err != nil {
			var ce connError
			if errors.As(err, &ce) {
				c.connError(ce)
			}
			return
		}
	}
}

// flushLazy writes what the reader left in the buffer, before it reads
// more (h2guard counts the frames written when the reader reads).
func (c *conn) flushLazy() error {
	if !c.lazyFlush.Load() {
		return nil
	}
	c.lockWrite()
	return c.unlockWrite(time.Time{})
}

// closingIdle reports whether a read error is the reader being woken to
// end a connection that closes gracefully.
func (c *conn) closingIdle(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ne net.Error
	return c.closing && errors.As(err, &ne) && ne.Timeout()
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	return binary.BigEndian.AppendUint32(b, v)
}

// frame handles one frame; a connError ends the connection.
func (c *conn) frame(fh frameHeader, p []byte) error {
	if c.hb.active && fh.typ != frameContinuation {
		return connError{ErrCodeProtocol, "frame inside a header block"}
	}
	if f, ok := checkFrame(fh, p); !ok {
		if f.stream {
			return c.streamError(fh.stream, f.code)
		}
		return connError{f.code, f.reason}
	}
	switch fh.typ {
	case frameData:
		return c.onData(fh, p)
	case frameHeaders:
		return c.onHeaders(fh, p)
	case frameContinuation:
		if !c.hb.active || fh.stream != c.hb.stream {
			return connError{ErrCodeProtocol, "unexpected CONTINUATION"}
		}
		return c.headerFragment(p, fh.flags&flagEndHeaders != 0)
	case frameRSTStream:
		return c.onRSTStream(fh, p)
	case frameSettings:
		return c.onSettings(fh, p)
	case framePing:
		if fh.flags&flagAck != 0 {
			return nil
		}
		c.lockWrite()
		c.wbuf = appendFrameHeader(c.wbuf, 8, framePing, flagAck, 0)
		c.wbuf = append(c.wbuf, p...)
		return c.unlockWriteLazy()
	case frameGoAway:
		// The client goes away: finish what it asked for, take nothing new.
		c.startShutdown()
		return nil
	case frameWindowUpdate:
		return c.onWindowUpdate(fh, p)
	default:
		return nil // PRIORITY is advice levee does not take; unknown types are ignored (§4.1)
	}
}

func (c *conn) onSettings(fh frameHeader, p []byte) error {
	if fh.flags&flagAck != 0 {
		c.mu.Lock()
		c.unacked--
		bad := c.unacked < 0
		c.mu.Unlock()
		if bad {
			return connError{ErrCodeProtocol, "SETTINGS ACK for nothing"}
		}
		return nil
	}
	// The ACK goes into the write buffer before a window opened here
	// wakes a writer, so that a peer sees it ahead of the DATA the new
	// settings let through, as it sees them from Go's server and nginx
	// (h2spec 6.9.2/1 drops frames met while it waits for the ACK). The
	// write lock is taken before c.mu, as every writer takes them.
	c.lockWrite()
	c.mu.Lock()
	for q := p; len(q) > 0; q = q[6:] {
		id, v := binary.BigEndian.Uint16(q), binary.BigEndian.Uint32(q[2:])
		if f, ok := checkSetting(id, v, false); !ok {
			c.mu.Unlock()
			c.unlockWrite(time.Time{})
			return connError{f.code, f.reason}
		}
		if id == settingInitialWindowSize {
			// §6.9.2: the change applies to every stream's window, which
			// may go negative; none may pass the maximum. Only this
			// goroutine adds to windows, so what is checked here holds
			// when it is applied below.
			delta := int64(v) - c.peerWindow
			for _, st := range c.streams {
				if st.sendWindow+delta > maxWindow {
					c.mu.Unlock()
					c.unlockWrite(time.Time{})
					return connError{ErrCodeFlowControl, "window overflow"}
				}
			}
		}
	}
	c.wbuf = appendFrameHeader(c.wbuf, 0, frameSettings, flagAck, 0)
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingInitialWindowSize:
			delta := int64(v) - c.peerWindow
			c.peerWindow = int64(v)
			for _, st := range c.streams {
				st.sendWindow += delta
				if delta > 0 {
					st.wakeWriter()
				}
			}
		case settingMaxFrameSize:
			c.peerFrame = int(min(v, maxFrameSize)) // larger frames gain nothing over TLS records
		}
	}
	c.mu.Unlock()
	return c.unlockWriteLazy()
}

func (c *conn) onWindowUpdate(fh frameHeader, p []byte) error {
	incr := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	c.mu.Lock()
	if fh.stream == 0 {
		if incr == 0 {
			c.mu.Unlock()
			return connError{ErrCodeProtocol, "WINDOW_UPDATE of 0"}
		}
		c.sendWindow += incr
		if c.sendWindow > maxWindow {
			c.mu.Unlock()
			return connError{ErrCodeFlowControl, "connection window overflow"}
		}
		c.wakeBlockedLocked()
		c.mu.Unlock()
		return nil
	}
	if fh.stream > c.maxClientID {
		c.mu.Unlock()
		return connError{ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
	}
	st := c.streams[fh.stream]
	if st == nil {
		c.mu.Unlock()
		return nil // a closed stream: ignored (§6.9)
	}
	if incr == 0 {
		c.mu.Unlock()
		return c.streamError(fh.stream, ErrCodeProtocol)
	}
	st.sendWindow += incr
	if st.sendWindow > maxWindow {
		c.mu.Unlock()
		return c.streamError(fh.stream, ErrCodeFlowControl)
	}
	st.wakeWriter()
	c.mu.Unlock()
	return nil
}

func (c *conn) onRSTStream(fh frameHeader, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fh.stream > c.maxClientID {
		return connError{ErrCodeProtocol, "RST_STREAM on an idle stream"}
	}
	if st := c.streams[fh.stream]; st != nil {
		c.closeStreamLocked(st, errClientReset)
	}
	return nil
}

var errClientReset = errors.New("h2: stream reset by the client")

func (c *conn) onData(fh frameHeader, p []byte) error {
	data, ok := dataPayload(fh, p)
	if !ok {
		return connError{ErrCodeProtocol, "DATA padding"}
	}
	n := int64(fh.length)
	c.mu.Lock()
	if fh.stream > c.maxClientID {
		c.mu.Unlock()
		return connError{ErrCodeProtocol, "DATA on an idle stream"}
	}
	if n > c.recvAvail {
		c.mu.Unlock()
		return connError{ErrCodeFlowControl, "connection window exceeded"}
	}
	c.recvAvail -= n
	st := c.streams[fh.stream]
	if st == nil || st.remoteEnded {
		// Closed, or half closed (remote): STREAM_CLOSED (§5.1). The
		// connection window is given back at once.
		c.refundConnLocked(n)
		c.mu.Unlock()
		c.flushRefund()
		if st != nil {
			c.mu.Lock()
			// Only if it is still the connection's: its handler may have
			// ended while the lock was let go, and freed the stream (to
			// the pool, for another request).
			if c.streams[fh.stream] == st {
				c.closeStreamLocked(st, errStreamClosed)
			}
			c.mu.Unlock()
		}
		return c.writeRST(fh.stream, ErrCodeStreamClosed)
	}
	if n > st.recvAvail {
		c.refundConnLocked(n)
		c.mu.Unlock()
		c.flushRefund()
		return c.streamError(fh.stream, ErrCodeFlowControl)
	}
	st.recvAvail -= n
	b := st.body
	if st.declLen >= 0 && st.got+int64(len(data)) > st.declLen {
		c.refundConnLocked(n)
		c.mu.Unlock()
		c.flushRefund()
		return c.streamError(fh.stream, ErrCodeProtocol)
	}
	st.got += int64(len(data))
	// Padding, and data no one will read, are given back now.
	refund := n - int64(len(data))
	if b == nil || b.closed {
		refund = n
	} else {
		b.buf = append(b.buf, data...)
	}
	if refund > 0 {
		c.refundConnLocked(refund)
		if b != nil && !b.closed {
			st.refundLocked(refund)
		}
	}
	if fh.flags&flagEndStream != 0 {
		c.endRemoteLocked(st)
	}
	if b != nil {
		b.wakeReader()
	}
	c.mu.Unlock()
	c.flushRefund()
	return nil
}

// endRemoteLocked records the client's END_STREAM; c.mu is held.
func (c *conn) endRemoteLocked(st *stream) {
	st.remoteEnded = true
	if b := st.body; b != nil && b.err == nil {
		// A body shorter than its content-length is malformed (§8.1.1):
		// as net/http, the handler's read fails, and it answers.
		b.err = io.EOF
		if st.declLen >= 0 && st.got != st.declLen {
			b.err = fmt.Errorf("h2: request declared a Content-Length of %d but only wrote %d bytes", st.declLen, st.got)
		}
		b.wakeReader()
	}
	if st.localEnded {
		c.removeStreamLocked(st)
	}
}

// streamError resets stream id for the client's error on it.
func (c *conn) streamError(id uint32, code ErrCode) error {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.closeStreamLocked(st, streamError{id, code})
	}
	c.mu.Unlock()
	return c.writeRST(id, code)
}

// writeRST writes a RST_STREAM from the reader.
func (c *conn) writeRST(id uint32, code ErrCode) error {
	c.lockWrite()
	c.wbuf = appendRSTStream(c.wbuf, id, code)
	return c.unlockWriteLazy()
}

// closeStreamLocked ends st for err: it leaves the connection's streams,
// its handler's context is cancelled, and whoever waits on it is woken.
// c.mu is held.
func (c *conn) closeStreamLocked(st *stream, err error) {
	if st.reset {
		return
	}
	st.reset, st.localEnded = true, true
	st.resetErr = err
	if b := st.body; b != nil {
		if b.err == nil || b.err == io.EOF && len(b.buf)-b.off > 0 {
			b.err = err
		}
		b.wakeReader()
	}
	c.removeStreamLocked(st)
	if st.sc != nil {
		st.sc.ctx.cancel()
	}
	st.wakeWriter()
}

// removeStreamLocked takes st out of the connection's streams.
func (c *conn) removeStreamLocked(st *stream) {
	if !st.inMap {
		return
	}
	st.inMap = false
	delete(c.streams, st.id)
	if len(c.streams) == 0 {
		c.lastActive = time.Now().UnixNano()
		if c.closing {
			c.wakeReaderToClose()
		}
	}
}

// refundConnLocked notes n bytes of the connection window to give back.
func (c *conn) refundConnLocked(n int64) { c.recvUnsent += n }

// flushRefund sends the WINDOW_UPDATEs due, from the reader (the write is
// flushed before the reader next blocks).
func (c *conn) flushRefund() {
	c.sendRefunds(nil, true)
}

// sendRefunds writes the WINDOW_UPDATE frames due on the connection and,
// if st is set, on st. A window is given back once half of it (or what
// the client has left, whichever is less) is due.
func (c *conn) sendRefunds(st *stream, lazy bool) {
	c.mu.Lock()
	connIncr, stIncr, id := c.takeRefundsLocked(st)
	c.mu.Unlock()
	c.writeRefunds(connIncr, stIncr, id, lazy)
}

// takeRefundsLocked takes the window increments due on the connection
// and, if st is set and still the connection's, on st; c.mu is held.
func (c *conn) takeRefundsLocked(st *stream) (connIncr, stIncr int64, id uint32) {
	if c.recvUnsent > 0 && (c.recvUnsent >= connRecvWindow/8 || c.recvUnsent >= c.recvAvail) {
		connIncr = c.recvUnsent
		c.recvAvail += connIncr
		c.recvUnsent = 0
	}
	if st != nil && st.inMap && !st.remoteEnded && st.recvUnsent > 0 &&
		(st.recvUnsent >= streamRecvWindow/8 || st.recvUnsent >= st.recvAvail) {
		stIncr = st.recvUnsent
		st.recvAvail += stIncr
		st.recvUnsent = 0
	}
	if st != nil {
		id = st.id
	}
	return connIncr, stIncr, id
}

// writeRefunds writes the WINDOW_UPDATE frames takeRefundsLocked took.
func (c *conn) writeRefunds(connIncr, stIncr int64, id uint32, lazy bool) {
	if connIncr == 0 && stIncr == 0 {
		return
	}
	c.lockWrite()
	if connIncr > 0 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(connIncr))
	}
	if stIncr > 0 {
		c.wbuf = appendWindowUpdate(c.wbuf, id, uint32(stIncr))
	}
	if lazy {
		c.unlockWriteLazy()
	} else {
		c.unlockWrite(time.Time{})
	}
}

// wakeBlockedLocked wakes every stream waiting for a window.
func (c *conn) wakeBlockedLocked() {
	for _, st := range c.blocked {
		st.wakeWriter()
	}
	clear(c.blocked)
	c.blocked = c.blocked[:0]
}

// lockWrite takes the write lock, counted among the waiters meanwhile.
func (c *conn) lockWrite() {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
}

// unlockWrite flushes the buffer unless another writer waits for the lock
// (which then flushes both) and releases the lock. deadline, if set, bounds
// the write together with WriteTimeout. Every holder of c.wmu releases it
// here, even one that wrote nothing: a holder that waited may be the one
// left to flush what others wrote (the reader's PING ack, say).
func (c *conn) unlockWrite(deadline time.Time) error {
	err := c.werr
	if len(c.wbuf) > 0 && (c.waiting.Load() == 0 || len(c.wbuf) >= flushAt) {
		err = c.flushLocked(deadline)
	}
	c.wmu.Unlock()
	return err
}

// unlockWriteLazy is the reader's unlockWrite: while it has more frames
// read and waiting, it leaves its answers in the buffer, to go with its
// later ones; it flushes before it next blocks.
func (c *conn) unlockWriteLazy() error {
	if c.br != nil && c.br.Buffered() >= frameHeaderLen && len(c.wbuf) < flushAt {
		c.lazyFlush.Store(true)
		err := c.werr
		c.wmu.Unlock()
		return err
	}
	return c.unlockWrite(time.Time{})
}

// flushLocked writes the buffer; c.wmu is held.
func (c *conn) flushLocked(deadline time.Time) error {
	c.lazyFlush.Store(false)
	if c.werr != nil {
		c.wbuf = c.wbuf[:0]
		return c.werr
	}
	if d := c.srv.WriteTimeout; d > 0 {
		if t := time.Now().Add(d); deadline.IsZero() || t.Before(deadline) {
			deadline = t
		}
	}
	if !deadline.IsZero() || c.wdeadline {
		c.nc.SetWriteDeadline(deadline)
		c.wdeadline = !deadline.IsZero()
	}
	_, err := c.nc.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if cap(c.wbuf) > keepWriteBuf {
		c.wbuf = nil // an idle connection keeps no more than a response's worth
	}
	if err != nil {
		c.werr = err
		c.nc.Close() // the reader ends, and with it every stream
	}
	return err
}

// connError ends the connection for e: GOAWAY, then the linger, then
// the close.
func (c *conn) connError(e connError) {
	c.mu.Lock()
	last := c.maxClientID
	if c.goingAway {
		// A GOAWAY is out already: the last stream id never goes up
		// (RFC 9113 §6.8), and the streams opened past it were not taken.
		last = c.goAwayLast
	}
	c.goingAway, c.goAwayLast = true, last
	c.mu.Unlock()
	c.lockWrite()
	c.wbuf = appendGoAway(c.wbuf, last, e.code)
	err := c.unlockWrite(time.Now().Add(linger))
	c.abort() // the handlers end now, not after the linger
	if err == nil {
		c.lingerClose()
	}
}

// lingerClose reads and drops what the client still sends, for a while,
// then closes.
func (c *conn) lingerClose() {
	c.nc.SetReadDeadline(time.Now().Add(linger))
	io.CopyN(io.Discard, c.nc, lingerBytes)
	c.nc.Close()
}

// startShutdown sends a GOAWAY naming the last stream taken, and closes
// the connection once its streams are done. Safe from any goroutine; the
// GOAWAY is written by a goroutine of the connection's own.
func (c *conn) startShutdown() {
	c.mu.Lock()
	if c.closing || c.closed {
		c.mu.Unlock()
		return
	}
	c.hwg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.hwg.Done()
		c.lockWrite()
		c.goAwayLocked()
		c.unlockWrite(time.Time{})
	}()
}

// goAwayLocked appends the graceful GOAWAY, once, and closes the
// connection if it has no stream left; c.wmu is held.
func (c *conn) goAwayLocked() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.closed || c.goingAway {
		return // one graceful GOAWAY, and none after an error's
	}
	c.closing, c.goingAway = true, true
	c.goAwayLast = c.maxClientID
	c.wbuf = appendGoAway(c.wbuf, c.goAwayLast, ErrCodeNo)
	if len(c.streams) == 0 {
		c.wakeReaderToClose()
	}
}

// wakeReaderToClose ends the reader's wait for a connection closing
// gracefully with no stream left; c.mu is held.
func (c *conn) wakeReaderToClose() {
	c.nc.SetReadDeadline(time.Now())
}

// startIdleTimer closes the connection after IdleTimeout without a stream.
func (c *conn) startIdleTimer() {
	d := c.srv.IdleTimeout
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.lastActive = time.Now().UnixNano()
	c.idleTimer = time.AfterFunc(d, c.onIdle)
	c.mu.Unlock()
}

func (c *conn) onIdle() {
	d := c.srv.IdleTimeout
	c.mu.Lock()
	if c.closed || c.closing {
		c.mu.Unlock()
		return
	}
	if len(c.streams) > 0 || c.handlers > 0 {
		c.idleTimer.Reset(d)
		c.mu.Unlock()
		return
	}
	if left := time.Duration(c.lastActive + int64(d) - time.Now().UnixNano()); left > 0 {
		c.idleTimer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.startShutdown()
}

// finish ends the connection: every stream is closed, its handlers'
// contexts cancelled; it returns once they have all returned.
func (c *conn) finish() {
	if c.stopParent != nil {
		c.stopParent()
	}
	c.abort()
	c.nc.Close()
	c.hwg.Wait()
}

// abort closes every stream and cancels the connection's context: no
// stream is taken, nor handler started, after it.
func (c *conn) abort() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		c.closeStreamLocked(st, errClientDisconnected)
	}
	c.cancelRunningLocked()
	pending := c.pending
	c.pending = nil
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.mu.Unlock()
	c.cancel()
	for _, st := range pending {
		st.abandon()
	}
}

// linkRunningLocked adds st, whose handler starts, to c.running; c.mu is
// held.
func (c *conn) linkRunningLocked(st *stream) {
	st.runPrev, st.runNext = nil, c.running
	if c.running != nil {
		c.running.runPrev = st
	}
	c.running = st
}

// unlinkRunningLocked takes st, whose handler returned, off c.running;
// c.mu is held.
func (c *conn) unlinkRunningLocked(st *stream) {
	if st.runPrev != nil {
		st.runPrev.runNext = st.runNext
	} else if c.running == st {
		c.running = st.runNext
	}
	if st.runNext != nil {
		st.runNext.runPrev = st.runPrev
	}
	st.runPrev, st.runNext = nil, nil
}

// cancelRunningLocked cancels the contexts of the requests whose handlers
// run; c.mu is held.
func (c *conn) cancelRunningLocked() {
	for st := c.running; st != nil; st = st.runNext {
		st.sc.ctx.cancel()
	}
}

// cancelRunning is cancelRunningLocked for a ConnContext's context that
// ended.
func (c *conn) cancelRunning() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.streams {
		if st.sc != nil {
			st.sc.ctx.cancel()
		}
	}
	c.cancelRunningLocked()
}
