package forward

import (
	"syscall"

	"github.com/leveeproxy/levee/internal/sockio"
)

// peekSocket looks at fd's receive queue without consuming or waiting.
// Where it cannot look (sockio.Peek: ENOSYS), it finds nothing, and the
// pool relies on the checks of levee's own buffer alone.
func peekSocket(fd uintptr) peekState {
	var b [1]byte
	switch n, errno := sockio.Peek(fd, b[:]); {
	case errno == syscall.EAGAIN || errno == syscall.ENOSYS:
		return peekEmpty
	case errno != 0 || n == 0:
		return peekClosed
	}
	return peekData
}
