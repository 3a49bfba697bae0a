package forward

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// h2Socket is a backend connection handed to HTTP/2: no exchange
// bookkeeping (peeks, per-read deadlines), which is HTTP/1.1's; its close
// is counted in the pool's stats. It reads and writes the socket through
// the connection's sockio.Conn, as HTTP/1.1 does: a read or write through
// net enters the runtime's syscall state (package sockio says what that
// costs on a busy core).
//
// Its writes are gathered: http2.ClientConn flushes each request's
// HEADERS on its own, one system call (and one wake-up of the backend)
// per request. Here a write lands in a buffer and one goroutine per
// connection writes what has gathered once the goroutines ready to run
// have had their turn (runtime.Gosched), so requests sent together leave
// in one write. What is not yet written is bounded (h2SocketBuffer, and
// one Write's bytes past it): a writer past the bound waits, so a backend
// that stops reading still holds its senders back, for at most timeout:
// each write to the socket has that long to finish. A write error is the
// connection's: the socket is closed, and every later write returns it.
type h2Socket struct {
	net.Conn
	bc *backendConn

	mu      sync.Mutex
	room    sync.Cond // signalled when the buffer has been written out
	buf     []byte    // to write, in order
	unsent  int       // bytes handed to Write and not yet written: buf's and the write's under way
	queued  bool      // the writer has been woken for buf
	closed  bool
	err     error
	wake    chan struct{}
	stopped chan struct{} // closed when the writer returns
	timeout time.Duration // each write's bound; 0: none
}

// h2SocketBuffer bounds what a connection gathers before its writers
// wait: a few frames of 16 KiB.
const h2SocketBuffer = 64 << 10

// h2SocketLinger bounds the last flush on Close: a GOAWAY the backend
// does not read within it is dropped with the connection.
const h2SocketLinger = time.Second

func newH2Socket(bc *backendConn, timeout time.Duration) *h2Socket {
	s := &h2Socket{Conn: bc.Conn, bc: bc, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		timeout: timeout}
	s.room.L = &s.mu
	go s.writeLoop()
	return s
}

// Read reads the socket (the h2 client's read loop).
func (s *h2Socket) Read(p []byte) (int, error) { return s.bc.io.Read(p) }

func (s *h2Socket) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.unsent >= h2SocketBuffer && s.err == nil && !s.closed {
		s.room.Wait()
	}
	if s.err != nil {
		return 0, s.err
	}
	if s.closed {
		return 0, net.ErrClosed
	}
	s.buf = append(s.buf, p...)
	s.unsent += len(p)
	if !s.queued {
		s.queued = true
		s.wake <- struct{}{}
	}
	return len(p), nil
}

// writeLoop writes what gathers until the socket is closed or fails.
func (s *h2Socket) writeLoop() {
	defer close(s.stopped)
	var out []byte
	for range s.wake {
		runtime.Gosched() // let the others ready now add theirs
		s.mu.Lock()
		for len(s.buf) > 0 && s.err == nil {
			out, s.buf = s.buf, out[:0]
			closing := s.closed
			s.mu.Unlock()
			if s.timeout > 0 && !closing {
				s.Conn.SetWriteDeadline(time.Now().Add(s.timeout))
			}
			_, err := s.bc.io.Write(out)
			s.mu.Lock()
			s.unsent -= len(out)
			if err != nil {
				s.err = err
			}
			s.room.Broadcast()
		}
		s.queued = false
		if s.err != nil || s.closed {
			s.mu.Unlock()
			s.bc.Close()
			return
		}
		if cap(out) > h2SocketBuffer {
			out = nil // an idle connection keeps no more than the bound
		}
		s.mu.Unlock()
	}
}

// Close writes what has gathered (a GOAWAY, say), within
// h2SocketLinger, and closes the connection.
func (s *h2Socket) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.stopped
		return nil
	}
	s.closed = true
	s.room.Broadcast()
	if !s.queued {
		s.queued = true
		s.wake <- struct{}{}
	}
	s.mu.Unlock()
	s.Conn.SetWriteDeadline(time.Now().Add(h2SocketLinger))
	<-s.stopped
	return nil
}
