//go:build unix

package forward

import "syscall"

// peekSocket looks at fd's receive queue without consuming or waiting.
func peekSocket(fd uintptr) peekState {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return peekEmpty
		case err != nil || n == 0:
			return peekClosed
		}
		return peekData
	}
}

// canWriteThenRead: a write inside a RawConn.Read, and the wait after it,
// is this platform's poller's (backendConn.writeThenRead).
const canWriteThenRead = true

// writeThenRead is a backendConn's held request and the buffer its
// response is read into, with step, the RawConn.Read function that writes
// the one and then reads the other.
type writeThenRead struct {
	pending []byte
	p       []byte
	wrote   int
	n       int
	err     error
	fn      func(fd uintptr) bool // step, made once
}

// step is called by RawConn.Read: first it writes (and asks to wait for
// readability, unless the write was not taken whole), then it reads.
func (w *writeThenRead) step(fd uintptr) bool {
	if w.wrote < len(w.pending) {
		for w.wrote < len(w.pending) {
			n, err := syscall.Write(int(fd), w.pending[w.wrote:])
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true // the caller finishes it with a blocking write
			case err != nil:
				w.err = err
				return true
			}
			w.wrote += n
		}
		return false // wait for the response
	}
	for {
		n, err := syscall.Read(int(fd), w.p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			w.err = err
		default:
			w.n = n
		}
		return true
	}
}
