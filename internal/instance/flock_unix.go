//go:build unix

package instance

import (
	"os"
	"syscall"
)

var errWouldBlock error = syscall.EWOULDBLOCK

// lockNB takes an exclusive flock on f without waiting.
func lockNB(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

func writableDir(d string) bool {
	st, err := os.Stat(d)
	return err == nil && st.IsDir() && syscall.Access(d, 2 /* W_OK */) == nil
}
