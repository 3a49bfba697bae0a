// Package sockio makes the system calls of the engines' TCP sockets:
// reads, writes and the backend pool's peek, through each connection's
// RawConn, without the runtime's syscall state; and the one write a
// response's first read sends (SendRead).
//
// net's reads and writes enter the runtime's syscall state around each
// system call, and that costs a proxy on a busy core twice:
//   - A write that wakes a peer on the same core (a backend sharing it) is
//     often preempted inside the call. The runtime's monitor then finds the
//     P in a system call, hands it to another thread, and the write's
//     return waits for it back: context switches and a futex.
//   - When the P has been idle (waiting for the backend), the monitor
//     sleeps deeply; the next system call that enters the syscall state
//     wakes it, and it then polls every 20 us for a while. So one such
//     call per request (the peek was the last) keeps it awake.
//
// The sockets are non-blocking, so their calls never block: a read or
// write that would wait does, as net's do, in the netpoller. With every
// call of a proxied request here, levee and a backend sharing a core went
// from 0.36 context switches and 0.14 monitor sleeps per request to 0.10
// and none (nginx: 0.07), and 10% less CPU per request.
package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// maxRW is the most one system call reads or writes, as in internal/poll.
const maxRW = 1 << 30

// Conn reads and writes one connection's socket. Init finds its RawConn;
// without one (not a TCP connection), Read and Write pass to the
// connection as it is. Reads are serialized with each other, and writes
// with each other, as net's are.
type Conn struct {
	c   net.Conn
	raw syscall.RawConn

	rmu  sync.Mutex
	rfn  func(fd uintptr) bool // readFD, made once
	rp   []byte                // the read's buffer
	held []byte                // SendRead's write, not yet written
	rn   int
	rerr syscall.Errno // of the read, or of the held write (sending)
	sent bool          // the held write is out: what follows is the read

	wmu  sync.Mutex
	wfn  func(fd uintptr) bool // writeFD, made once
	wp   []byte
	wn   int
	werr syscall.Errno
}

// Init sets s up for c, false if c has no RawConn (then s passes every
// read and write to c).
func (s *Conn) Init(c net.Conn) bool {
	s.c = c
	sc, ok := c.(syscall.Conn)
	if !ok || !rawSupported {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	s.raw = raw
	s.rfn, s.wfn = s.readFD, s.writeFD
	return true
}

// RawConn is the connection's RawConn, nil if s passes every read and
// write to the connection: for Peek.
func (s *Conn) RawConn() syscall.RawConn { return s.raw }

// ReadNow and WriteNow are one read(2) and one write(2) on fd, a socket
// in non-blocking mode, for an event loop that watches it itself: EAGAIN
// comes back as it is, and nothing waits.
func ReadNow(fd int, p []byte) (int, syscall.Errno)  { return read(uintptr(fd), p) }
func WriteNow(fd int, p []byte) (int, syscall.Errno) { return write(uintptr(fd), p) }

// Read is net.Conn's Read.
func (s *Conn) Read(p []byte) (int, error) {
	if s.raw == nil {
		return s.c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.sent = true
	return s.read(p)
}

// SendRead writes held, then reads into p as Read does, but waits for the
// socket to be readable before it first tries it. The write is made after
// the RawConn has reset the socket's read readiness, so the answer to what
// held says cannot come unseen; bytes that were there before it, though,
// are not seen until more come or the read's deadline passes. So SendRead
// is for a peer that sends nothing unasked, on a socket found empty just
// before: a backend, after the request's only write. It saves the read
// that Read would first make, and find empty (EAGAIN), nearly every time.
// A held write the socket does not take whole is finished as Write does.
func (s *Conn) SendRead(held, p []byte) (int, error) {
	if s.raw == nil || len(held) == 0 || len(p) == 0 {
		if _, err := s.Write(held); err != nil {
			return 0, err
		}
		return s.Read(p)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.held, s.sent = held, false
	n, err := s.read(p)
	rest := s.held
	s.held = nil
	if err != nil || s.sent {
		return n, err
	}
	// The socket's send buffer is full: the rest as Write does, then the read.
	if _, err := s.Write(rest); err != nil {
		return 0, err
	}
	s.sent = true
	return s.read(p)
}

// read reads into p (not empty) under rmu.
func (s *Conn) read(p []byte) (int, error) {
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	s.rp, s.rn, s.rerr = p, 0, 0
	if !s.sent {
		wroteIO()
	}
	err := s.raw.Read(s.rfn)
	n, errno := s.rn, s.rerr
	s.rp, s.rn, s.rerr = nil, 0, 0
	switch {
	case err != nil:
		return 0, s.opError("read", err)
	case !s.sent:
		if errno == syscall.EAGAIN {
			return 0, nil // SendRead finishes the write
		}
		return 0, s.opError("write", os.NewSyscallError("write", errno))
	case errno != 0:
		return 0, s.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFD is the RawConn.Read function: the held write first, if any
// (false: then wait for readability), then the read.
func (s *Conn) readFD(fd uintptr) bool {
	if !s.sent {
		for len(s.held) > 0 {
			n, errno := write(fd, s.held)
			switch errno {
			case 0:
				s.held = s.held[n:]
				continue
			case syscall.EINTR:
				continue
			}
			s.rerr = errno
			return true
		}
		s.sent = true
		return false
	}
	for {
		n, errno := read(fd, s.rp)
		switch errno {
		case 0:
			s.rn = n
			readIO(fd)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for readability
		}
		s.rerr = errno
		return true
	}
}

// Write is net.Conn's Write: all of p, or an error.
func (s *Conn) Write(p []byte) (int, error) {
	if s.raw == nil {
		return s.c.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wp, s.wn, s.werr = p, 0, 0
	wroteIO()
	err := s.raw.Write(s.wfn)
	n, errno := s.wn, s.werr
	s.wp, s.wn, s.werr = nil, 0, 0
	switch {
	case err != nil:
		return n, s.opError("write", err)
	case errno != 0:
		return n, s.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeFD is the RawConn.Write function: write until all of wp is out
// (false: wait for writability first).
func (s *Conn) writeFD(fd uintptr) bool {
	for s.wn < len(s.wp) {
		p := s.wp[s.wn:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		n, errno := write(fd, p)
		switch errno {
		case 0:
			s.wn += n
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.werr = errno
		return true
	}
	return true
}

// opError is err as net reports a failed read or write: an *net.OpError
// of op (RawConn's own, for a deadline or a closed connection, say
// "raw-read"; it is renamed).
func (s *Conn) opError(op string, err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		oe.Op = op
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: err}
}

// Peek looks at a socket's receive queue without consuming anything or
// waiting: n bytes are there (n > 0), the peer has closed (n == 0 and no
// errno), or nothing is there yet (EAGAIN). fd is a RawConn's.
func Peek(fd uintptr, p []byte) (n int, errno syscall.Errno) {
	for {
		n, errno = peek(fd, p)
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}
