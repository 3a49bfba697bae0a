//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// terminal is the screen levee top draws on while it runs: the alternate
// screen, with stdin in raw mode (when it is a terminal) so that keys
// arrive one at a time and unechoed. close restores both.
type terminal struct {
	out     *os.File
	keys    chan []byte    // what stdin sends; nil when stdin is not a terminal
	resized chan os.Signal // SIGWINCH
	restore func()         // stdin's mode; nil when not raw
	stop    func()         // ends and joins the key reader
}

// openTerminal enters the alternate screen on out, and raw mode on in
// when in is a terminal; the caller must close it.
func openTerminal(out, in *os.File) (*terminal, error) {
	t := &terminal{out: out, resized: make(chan os.Signal, 1), stop: func() {}}
	if fd := int(in.Fd()); term.IsTerminal(fd) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return nil, err
		}
		t.restore = func() { _ = term.Restore(fd, old) }
		t.keys = make(chan []byte)
		if t.stop, err = readKeys(fd, t.keys); err != nil {
			t.restore()
			return nil, err
		}
	}
	signal.Notify(t.resized, syscall.SIGWINCH)
	out.WriteString(screenEnter)
	return t, nil
}

// close leaves the alternate screen and restores stdin's mode.
func (t *terminal) close() {
	signal.Stop(t.resized)
	t.stop()
	t.out.WriteString(screenLeave)
	if t.restore != nil {
		t.restore()
	}
}

// readKeys sends what fd reads to keys until stop is called (or fd ends,
// when it closes keys). It polls fd beside a pipe that stop closes, so
// the reader ends without a read left blocked on the terminal.
func readKeys(fd int, keys chan<- []byte) (stop func(), err error) {
	wakeR, wakeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wakeR.Fd()), Events: unix.POLLIN}}
		buf := make([]byte, 256)
		for {
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			} else if err != nil || fds[1].Revents != 0 {
				return
			}
			n, err := unix.Read(fd, buf)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if n <= 0 {
				close(keys)
				return
			}
			select {
			case keys <- append([]byte(nil), buf[:n]...):
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		wakeW.Close()
		<-done
		wakeR.Close()
	}, nil
}
