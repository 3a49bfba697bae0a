package h1loop

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A TLS connection in the loop. crypto/tls cannot be driven without a
// net.Conn that blocks, but it keeps what it has read when a read fails
// with a temporary net.Error, and goes on from there at the next Read. So
// its net.Conn (session) is the socket itself, read with the loop's
// non-blocking reads: a read that would block fails as a timeout does,
// and the loop waits for the socket as it waits for a plain one. What the
// session writes is gathered (seal) and written as the loop writes
// plaintext: one write for an answer, however many records it takes. The
// handshake, which needs many round trips, runs on a goroutine of its
// own, over a blocking copy of the socket, and the loop takes the
// connection once it is done.
//
// The kernel's TLS (kTLS) would let the loop read and write plaintext,
// but it is not on every host (it is a module of its own), and Go gives
// the traffic secrets it needs only through a key log.

// session is a TLS connection's socket as its tls.Conn sees it.
type session struct {
	tc *tls.Conn
	fd int
	// under, while set, is a blocking connection of the socket that every
	// read and write goes to: during the handshake, and once the
	// connection is handed off (TLSOver).
	under net.Conn
	// drained: the socket had nothing more at the loop's last read of it,
	// so the next read would block (the loop's set is level-triggered:
	// more coming wakes the loop).
	drained bool
	// sealing: writes are gathered in out for the caller (seal); else
	// written at once as far as the socket takes them (an alert).
	sealing bool
	out     []byte
	// more: the session may hold bytes the loop has not read (its buffers
	// are not the socket's, which the loop's set watches): the loop reads
	// before it waits.
	more bool
	// local, remote: the socket's addresses, for tls.Conn.
	local, remote net.Addr
}

// errAgain is a read of the socket that would block: temporary, so the
// session keeps what it has and tries again at its next Read.
var errAgain = &againError{}

type againError struct{}

func (*againError) Error() string   { return "h1loop: the socket has nothing to read yet" }
func (*againError) Timeout() bool   { return true }
func (*againError) Temporary() bool { return true }

func (s *session) Read(p []byte) (int, error) {
	if s.under != nil {
		return s.under.Read(p)
	}
	if s.drained {
		return 0, errAgain
	}
	n, errno := sysRead(s.fd, p)
	switch {
	case errno == syscall.EAGAIN:
		s.drained = true
		return 0, errAgain
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	if n < len(p) {
		s.drained = true // a short read took all there was
	}
	return n, nil
}

func (s *session) Write(p []byte) (int, error) {
	if s.under != nil {
		return s.under.Write(p)
	}
	if s.sealing {
		s.out = append(s.out, p...)
		return len(p), nil
	}
	// Written by a read (an alert, a key update's answer): as far as the
	// socket takes it now; the session fails if it does not.
	n, errno := sysWrite(s.fd, p)
	if errno != 0 {
		return max(n, 0), errno
	}
	if n < len(p) {
		return n, syscall.EAGAIN
	}
	return n, nil
}

// Close closes the blocking connection, if any: the loop closes its own
// descriptor.
func (s *session) Close() error {
	if s.under != nil {
		return s.under.Close()
	}
	return nil
}

// NetConn is the connection underneath, for netlimit's look through
// wrappers (tls.Conn's NetConn gives this session).
func (s *session) NetConn() net.Conn { return s.under }

func (s *session) LocalAddr() net.Addr  { return s.local }
func (s *session) RemoteAddr() net.Addr { return s.remote }
func (s *session) SetDeadline(t time.Time) error {
	if s.under != nil {
		return s.under.SetDeadline(t)
	}
	return nil // the loop keeps the times
}
func (s *session) SetReadDeadline(t time.Time) error {
	if s.under != nil {
		return s.under.SetReadDeadline(t)
	}
	return nil
}
func (s *session) SetWriteDeadline(t time.Time) error {
	if s.under != nil {
		return s.under.SetWriteDeadline(t)
	}
	return nil
}

// seal encrypts p into buf (its contents replaced) and returns the
// records: the caller writes them.
func (s *session) seal(p, buf []byte) ([]byte, error) {
	s.sealing, s.out = true, buf[:0]
	_, err := s.tc.Write(p)
	out := s.out
	s.sealing, s.out = false, nil
	return out, err
}

// sealBufs are the holders' buffers for sealing (Conn.Write); the loop
// has its own.
var sealBufs = sync.Pool{New: func() any { return new([]byte) }}

// sealKeep is the largest buffer kept for the next seal.
const sealKeep = 64 << 10

// IsTLS reports whether c is a TLS connection.
func (c *Conn) IsTLS() bool { return c.tls != nil }

// ConnectionState is a TLS connection's state (the zero value for a plain
// one). Safe from any goroutine once the loop has it.
func (c *Conn) ConnectionState() tls.ConnectionState {
	if c.tls == nil {
		return tls.ConnectionState{}
	}
	return c.tls.tc.ConnectionState()
}

// TLSOver is, for the handler of a handed-off TLS connection (Handoff),
// its session, reading and writing through under from now on: nc, or a
// wrapper of it. nil for a plain connection.
func (c *Conn) TLSOver(under net.Conn) *tls.Conn {
	if c.tls == nil {
		return nil
	}
	c.tls.under = under
	return c.tls.tc
}

// startHandshake makes c, just accepted, a TLS connection, and starts its
// handshake (handshake), which Close can end (endHandshakes).
func (l *loop) startHandshake(c *Conn) {
	s := &session{fd: c.fd, local: l.s.local, remote: net.TCPAddrFromAddrPort(c.peer)}
	s.tc = tls.Server(s, l.s.o.TLS)
	c.tls = s
	c.state.Store(stShaking)
	l.s.shakeMu.Lock()
	if l.s.shakes == nil {
		l.s.shakes = make(map[*Conn]struct{})
	}
	l.s.shakes[c] = struct{}{}
	l.s.shaking.Add(1)
	l.s.shakeMu.Unlock()
	go l.handshake(c)
}

// handshake runs c's TLS handshake, on a goroutine of its own (c is
// counted open, in no loop's set): an HTTP/1.1 connection goes to its
// loop (adopt), any other to the handler (Handoff), and one whose
// handshake fails within HeadTimeout is closed.
func (l *loop) handshake(c *Conn) {
	defer l.s.shaking.Done()
	s := c.tls
	nc, err := blocking(c.fd)
	if err == nil {
		s.under = nc
		nc.SetDeadline(time.Now().Add(l.s.o.HeadTimeout))
		err = s.tc.Handshake()
	}
	l.s.shakeMu.Lock()
	delete(l.s.shakes, c)
	l.s.shakeMu.Unlock()
	if err != nil || c.killed.Load() {
		if nc != nil {
			nc.Close()
		}
		l.drop(c)
		return
	}
	nc.SetDeadline(time.Time{})
	if p := s.tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		// HTTP/2, say: the handler's, over the blocking copy.
		s.under = nil
		l.leave(c)
		l.s.o.Handler.Handoff(c, nc, nil)
		return
	}
	s.under = nil
	nc.Close() // the loop reads its own descriptor
	s.more = true
	if !l.post(c) { // adopt takes it
		l.drop(c)
	}
}

// drop closes c, a connection in no loop.
func (l *loop) drop(c *Conn) {
	l.leave(c)
	l.s.o.Handler.Closed(c)
}

// leave closes the loops' descriptor of c, a connection in no loop, and
// stops counting it.
func (l *loop) leave(c *Conn) {
	l.s.open.Add(-1)
	c.state.Store(stClosed)
	syscall.Close(c.fd)
}

// adopt takes into the loop a TLS connection whose handshake is done, and
// reads what its client sent with it.
func (l *loop) adopt(c *Conn) {
	c.state.Store(stLoop)
	l.conns[c.fd] = c
	if c.killed.Load() || l.ctl(syscall.EPOLL_CTL_ADD, c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP) != nil {
		l.close(c)
		return
	}
	l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(l.s.o.IdleTimeout))
	c.tls.more = false
	l.read(c)
}

// readTLS reads c's session into p, in the loop: until the socket has no
// more, the session fails, or p is full (the session may hold more then).
// n > 0, or the error: errAgain for nothing yet.
func (l *loop) readTLS(c *Conn, p []byte) (int, error) {
	s := c.tls
	s.drained = false
	n := 0
	for n < len(p) {
		k, err := s.tc.Read(p[n:])
		n += k
		if err != nil {
			if n > 0 {
				// What came is served first. A failed session keeps its
				// error for the next Read, and the level-triggered set
				// reports the socket again.
				return n, nil
			}
			return 0, err
		}
	}
	s.more = true
	return n, nil
}

// blocking is a blocking connection of a copy of the socket fd.
func blocking(fd int) (net.Conn, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "h1loop-tls")
	nc, err := net.FileConn(f)
	f.Close()
	return nc, err
}
