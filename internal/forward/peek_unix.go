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
