// Package netlimit bounds the connections a listener keeps open: the
// proxy's listeners (server.max_conns) and the admin listener alike. It
// also paces a slow client's body (PacedReader), closes a connection
// lingering (Linger), and watches the client of a request that waits
// (PeerCtx, peer.go).
package netlimit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/sockio"
)

// Listener closes connections accepted beyond max open ones, or beyond
// perIP open ones from one client address, at once, rather than leaving them
// in the kernel's backlog where clients time out slowly and retry. It keeps
// the open connections, so a drain that runs out of time can close them
// (CloseAll). Safe for concurrent use.
type Listener struct {
	net.Listener
	open atomic.Int64
	// fresh counts the open connections whose first request has not
	// begun (Started).
	fresh atomic.Int64
	o     Options

	mu    sync.Mutex
	conns map[*Conn]struct{}
	perIP map[netip.Addr]int // open connections by client address, when o.PerIP > 0
	// refusing are the refused connections waiting for their request's
	// first bytes to be answered (refuse); closed: Close has begun.
	refusing map[net.Conn]struct{}
	closed   bool
	answers  sync.WaitGroup // the goroutines answering refusing
}

// Options bound a Listener.
type Options struct {
	Max   int // open connections
	PerIP int // open connections from one client address; 0: no bound
	// Exempt reports an address PerIP does not count (a trusted proxy,
	// which carries many clients); nil exempts none.
	Exempt func(netip.Addr) bool
	// Refusal, if set, is written to a connection refused at accept, for
	// reason (MaxConns or ConnsPerIP), before it is closed: a plain HTTP
	// listener's 503.
	Refusal func(reason string) []byte
	// OnReject is called for each connection refused at accept; nil: none.
	OnReject func(reason string)
}

// The reasons a Listener refuses a connection.
const (
	MaxConns   = "max-conns"
	ConnsPerIP = "conns-per-ip"
)

// New returns ln bounded at max open connections; onReject (nil: nothing)
// is called for each connection closed at accept.
func New(ln net.Listener, max int, onReject func()) *Listener {
	o := Options{Max: max}
	if onReject != nil {
		o.OnReject = func(string) { onReject() }
	}
	return NewWith(ln, o)
}

// NewWith returns ln bounded by o.
func NewWith(ln net.Listener, o Options) *Listener {
	l := &Listener{Listener: ln, o: o, conns: map[*Conn]struct{}{}, refusing: map[net.Conn]struct{}{}}
	if o.PerIP > 0 {
		l.perIP = map[netip.Addr]int{}
	}
	return l
}

// Accept returns the next connection within the bounds, as a *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc, reason := l.Adopt(c)
		if reason != "" {
			l.Refuse(c, reason)
			continue
		}
		return cc, nil
	}
}

// Adopt counts c, accepted from l's socket by someone else (the event
// loop accepts its own), as Accept counts what it returns; reason is why
// c is not within the bounds ("" when counted). A refused c is the
// caller's, to Refuse.
func (l *Listener) Adopt(c net.Conn) (*Conn, string) {
	if l.open.Add(1) > int64(l.o.Max) {
		l.open.Add(-1)
		return nil, MaxConns
	}
	cc := Wrap(c)
	cc.l = l
	if l.perIP != nil && cc.peer.IsValid() && (l.o.Exempt == nil || !l.o.Exempt(cc.peer)) {
		cc.counted = true
	}
	l.mu.Lock()
	if cc.counted && l.perIP[cc.peer] >= l.o.PerIP {
		l.mu.Unlock()
		l.open.Add(-1)
		return nil, ConnsPerIP
	}
	if cc.counted {
		l.perIP[cc.peer]++
	}
	l.conns[cc] = struct{}{}
	l.mu.Unlock()
	cc.fresh.Store(true)
	l.fresh.Add(1)
	return cc, ""
}

// Refuse closes c, refused by Adopt for reason, as Accept closes the
// connections beyond its bounds (refuse).
func (l *Listener) Refuse(c net.Conn, reason string) { l.refuse(c, reason) }

// refuse closes c, refused for reason. With a Refusal it answers first,
// on a goroutine of its own (at most maxAnswering at once, beyond which a
// refused connection is closed unanswered): it waits, up to LingerTime,
// for the request's first bytes, writes the refusal and closes lingering.
// Written at accept instead, the refusal reaches a client that may not
// have sent its request yet, which takes it for no answer at all (Go's
// client: "Unsolicited response received on idle HTTP channel", an error
// it does not retry); and closed at once with the request unread, the
// kernel answers the request with a reset, which can destroy the refusal.
func (l *Listener) refuse(c net.Conn, reason string) {
	if l.o.OnReject != nil {
		l.o.OnReject(reason)
	}
	if l.o.Refusal == nil || !l.answer(c, l.o.Refusal(reason)) {
		c.Close()
	}
}

// maxAnswering bounds the refused connections answered at once: a flood
// of connections beyond the bounds holds no more goroutines than this.
const maxAnswering = 256

// answer starts answering refusal on c, or reports false when it cannot
// (Close has begun, or maxAnswering are being answered).
func (l *Listener) answer(c net.Conn, refusal []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.refusing) >= maxAnswering {
		return false
	}
	l.refusing[c] = struct{}{}
	l.answers.Go(func() {
		c.SetDeadline(time.Now().Add(LingerTime))
		var first [1]byte
		if n, _ := c.Read(first[:]); n == 1 {
			c.Write(refusal)
			drain(c)
		}
		c.Close()
		l.mu.Lock()
		delete(l.refusing, c)
		l.mu.Unlock()
	})
	return true
}

// Close closes the socket, and the refused connections still waiting for
// their answer, and returns once their goroutines have.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.refusing {
		c.Close()
	}
	l.mu.Unlock()
	l.answers.Wait()
	return err
}

// Open is the number of connections accepted and not yet closed.
func (l *Listener) Open() int64 { return l.open.Load() }

// Fresh is how many open connections have not begun their first request:
// one whose client connected but has not sent it yet, or whose request
// the server has not read yet (see Started).
func (l *Listener) Fresh() int64 { return l.fresh.Load() }

// CloseAll closes every open connection accepted by l.
func (l *Listener) CloseAll() {
	l.mu.Lock()
	conns := make([]*Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.linger.Store(false) // now: the drain is out of time
		c.Close()
	}
}

// Conn is a connection a Listener counts; closing it frees its place.
type Conn struct {
	net.Conn
	once sync.Once
	l    *Listener // nil for a Conn made by Wrap alone
	// peer is the peer's address (invalid for a peer not on TCP), read
	// once per connection: a request reads it from here rather than down
	// the chain of RemoteAddr, whose memory is cold on a server with many
	// connections. ip is it formatted.
	peer    netip.Addr
	ip      string
	counted bool // in l.perIP
	linger  atomic.Bool
	fresh   atomic.Bool // counted in l.fresh: see Started
	io      sockio.Conn // the socket's reads and writes
}

// Read reads the socket (sockio.Conn).
func (c *Conn) Read(p []byte) (int, error) { return c.io.Read(p) }

// Write writes the socket (sockio.Conn).
func (c *Conn) Write(p []byte) (int, error) { return c.io.Write(p) }

// Wrap makes c a Conn counted by no listener (Accept's, and tests').
func Wrap(c net.Conn) *Conn {
	cc := &Conn{Conn: c}
	if a, ok := peerAddr(c.RemoteAddr()); ok {
		cc.peer, cc.ip = a, a.String()
	}
	cc.io.Init(c)
	return cc
}

// PeerOf is the peer's address of c, a Conn or a wrapper of it (TLS),
// read without a system call or a walk down RemoteAddr; false for another
// connection.
func PeerOf(c net.Conn) (netip.Addr, bool) {
	if v := connOf(c); v != nil && v.peer.IsValid() {
		return v.peer, true
	}
	return netip.Addr{}, false
}

// PeerIP is the peer's address as PeerIPOf gives it, for a caller that
// holds the Conn itself (no walk through wrappers).
func (c *Conn) PeerIP() string { return c.ip }

// Peer is the peer's address as PeerOf gives it (invalid if not on TCP).
func (c *Conn) Peer() netip.Addr { return c.peer }

// PeerIPOf is PeerOf formatted (as at accept, so without allocating);
// "" for another connection.
func PeerIPOf(c net.Conn) string {
	if v := connOf(c); v != nil {
		return v.ip
	}
	return ""
}

// Rebind puts nc under c in place of the connection it had: for a
// connection whose socket passes from one engine to another (the event
// loop hands one to fasthttp), so that it stays counted as one. No other
// goroutine may use c meanwhile.
func (c *Conn) Rebind(nc net.Conn) {
	c.Conn = nc
	c.io = sockio.Conn{}
	c.io.Init(nc)
}

// TakeLinger reports whether Linger was asked for, and clears it: for an
// engine that closes lingering itself (the event loop), so that Close
// does not.
func (c *Conn) TakeLinger() bool { return c.linger.Swap(false) }

// Linger makes Close end the connection gracefully, for a server that
// answers and closes before it has read all the client sent (a refusal):
// closing a socket with unread input makes the kernel send a reset, which
// can destroy the answer before the client reads it. Close then shuts the
// write side, so the client sees the answer and an end, and reads and
// discards what the client still sends, for at most LingerTime and
// LingerBytes, before it closes.
func (c *Conn) Linger() { c.linger.Store(true) }

// The bounds of a lingering close: a client that keeps sending cannot hold
// its connection (or the goroutine closing it) longer than this.
const (
	LingerTime  = time.Second
	LingerBytes = 1 << 20
)

// Started marks the connection c is, or wraps (a TLS or peeked one), as
// no longer fresh: its first request has begun, or it is not one to wait
// for (HTTP/2, whose refused streams their clients send again). The
// server calls it at a connection's first request: Listener.Fresh counts
// the connections it has not reached yet.
func Started(c net.Conn) {
	if cc := connOf(c); cc != nil {
		cc.started()
	}
}

func (c *Conn) started() {
	if c.fresh.Load() && c.fresh.Swap(false) && c.l != nil {
		c.l.fresh.Add(-1)
	}
}

// Close closes the connection and, once, gives its place back.
func (c *Conn) Close() error {
	c.started() // a fresh count is of open connections
	if c.linger.Swap(false) {
		drain(c.Conn)
	}
	err := c.Conn.Close()
	c.once.Do(func() {
		if l := c.l; l != nil {
			l.open.Add(-1)
			l.mu.Lock()
			delete(l.conns, c)
			if c.counted {
				if l.perIP[c.peer]--; l.perIP[c.peer] <= 0 {
					delete(l.perIP, c.peer)
				}
			}
			l.mu.Unlock()
		}
	})
	return err
}

// drain half-closes c and reads what the peer still sends, within the
// linger bounds, until it too closes.
func drain(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.SetReadDeadline(time.Now().Add(LingerTime)) != nil {
		return
	}
	buf := discards.Get().(*[4096]byte)
	defer discards.Put(buf)
	for n := 0; n < LingerBytes; {
		m, err := c.Read(buf[:])
		if err != nil {
			return
		}
		n += m
	}
}

var discards = sync.Pool{New: func() any { return new([4096]byte) }}

// peerAddr is a TCP peer's address.
func peerAddr(a net.Addr) (netip.Addr, bool) {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// MinRate is server.min_rate: a transfer that has moved fewer than Rate
// bytes a second since it began, once Grace has passed, is too slow.
// A zero Rate is off.
type MinRate struct {
	Rate  int64 // bytes per second
	Grace time.Duration
}

// Deadline is when a transfer that began at start must have moved n bytes
// in all, capped at limit (the transfer's own timeout; zero: none). A
// reader or writer sets it before each read or write of the bytes that
// bring it to n, so a client that stalls is cut off without a timer of
// levee's own.
func (m MinRate) Deadline(start time.Time, n int64, limit time.Time) time.Time {
	if m.Rate <= 0 {
		return limit
	}
	secs := n / m.Rate
	if secs > 1<<32 { // far past any timeout (and past overflow)
		return limit
	}
	d := start.Add(m.Grace + time.Duration(secs)*time.Second + time.Duration(n%m.Rate)*time.Second/time.Duration(m.Rate))
	if !limit.IsZero() && limit.Before(d) {
		return limit
	}
	return d
}

// ErrTooSlow is a transfer cut off for being slower than its MinRate.
var ErrTooSlow = errors.New("netlimit: client slower than server.min_rate")

// ReadDeadliner is a connection (or an HTTP/2 stream's
// http.ResponseController) whose reads take a deadline.
type ReadDeadliner interface{ SetReadDeadline(time.Time) error }

// PacedReader reads a client's request body, setting the read deadline
// before each read to when the next byte is due at Rate (counted from
// Start, after the grace); a client slower than that fails with ErrTooSlow. Limit (zero:
// none) is the body's own timeout, server.read_timeout: a read that times
// out at it fails as a timeout, not ErrTooSlow.
type PacedReader struct {
	R     io.Reader
	Conn  ReadDeadliner
	Rate  MinRate
	Start time.Time
	Limit time.Time
	N     int64 // bytes read so far
}

func (r *PacedReader) Read(p []byte) (int, error) {
	due := r.Rate.Deadline(r.Start, r.N+1, r.Limit)
	r.Conn.SetReadDeadline(due)
	n, err := r.R.Read(p)
	r.N += int64(n)
	if err != nil && isTimeout(err) && !due.Equal(r.Limit) {
		err = ErrTooSlow
	}
	return n, err
}

// WriteDeadline is when a write of n bytes, begun at now, of a transfer
// that began at start must be done: n bytes at Rate, but not before the
// grace has passed, capped at limit (zero: none). A write, not the whole
// transfer, is timed: the kernel's socket buffers take megabytes from a
// client that reads nothing, so the bytes written so far say little of how
// fast it reads, while a full buffer makes each write wait for the client.
func (m MinRate) WriteDeadline(start, now time.Time, n int64, limit time.Time) time.Time {
	if m.Rate <= 0 {
		return limit
	}
	d := now.Add(time.Duration(n) * time.Second / time.Duration(m.Rate))
	if g := start.Add(m.Grace); d.Before(g) {
		d = g
	}
	if !limit.IsZero() && limit.Before(d) {
		return limit
	}
	return d
}

func isTimeout(err error) bool {
	if err == io.EOF {
		return false // every body's end: no errors.As, whose target escapes
	}
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
