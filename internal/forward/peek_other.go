//go:build !unix

package forward

// peekSocket cannot look at a socket here: the pool then relies on the
// checks of levee's own buffer alone.
func peekSocket(uintptr) peekState { return peekEmpty }

// canWriteThenRead: not here; a request is written as it comes.
const canWriteThenRead = false

type writeThenRead struct {
	pending, p []byte
	wrote, n   int
	err        error
	fn         func(fd uintptr) bool
}

func (w *writeThenRead) step(uintptr) bool { return true }
