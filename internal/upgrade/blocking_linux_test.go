package upgrade

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blocking reports whether ln's socket is in blocking mode.
func blocking(t *testing.T, ln *net.TCPListener) bool {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags uintptr
	rc.Control(func(fd uintptr) {
		flags, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	})
	return flags&syscall.O_NONBLOCK == 0
}

// inAccept4 reports whether a thread of this process is in accept4(2):
// an Accept blocked in the kernel, not parked in the poller.
func inAccept4() bool {
	tasks, _ := filepath.Glob("/proc/self/task/*/syscall")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), "288 ") { // accept4 on amd64
			return true
		}
	}
	return false
}

// Handing a socket to a new process (os/exec takes its copy's Fd()) puts
// the socket, shared with this process's listener, in blocking mode; an
// Accept then waiting for a connection blocks in the kernel, where the
// deadline Pause kicks it with does not reach. Pause must return anyway
// (it woke it with a connection of its own, which Accept drops), and
// nonblocking must undo the mode. Before, Pause waited until some client
// connected: 30 s and more with the old levee not accepting and the new
// one waiting for its state.
func TestPauseWakesAnAcceptBlockedInTheKernel(t *testing.T) {
	if syscall.SYS_ACCEPT4 != 288 {
		t.Skip("accept4's number is 288 on amd64 only")
	}
	var s Sockets
	l, err := s.Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := l.(*Gate)
	defer g.Close()
	f, err := g.ln.File()
	if err != nil {
		t.Fatal(err)
	}
	f.Fd() // what os/exec does to an ExtraFile
	defer f.Close()
	if !blocking(t, g.ln) {
		t.Fatal("the socket is not in blocking mode after Fd(): the test shows nothing")
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	(<-accepted).Close()
	deadline := time.Now().Add(5 * time.Second)
	for !inAccept4() { // the next Accept has entered the kernel
		if time.Now().After(deadline) {
			t.Fatal("no Accept blocked in accept4")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	paused := make(chan struct{})
	go func() { s.Pause(); close(paused) }()
	select {
	case <-paused:
	case <-time.After(5 * time.Second):
		// unblock it for the cleanup, then fail
		if c, err := net.Dial("tcp", g.Addr().String()); err == nil {
			c.Close()
		}
		<-paused
		t.Fatal("Pause did not return within 5s with an Accept blocked in the kernel")
	}
	select {
	case c, ok := <-accepted:
		if ok {
			t.Fatalf("Accept returned pause's own connection from %v", c.RemoteAddr())
		}
	default:
	}
	s.nonblocking()
	if blocking(t, g.ln) {
		t.Fatal("the socket is still in blocking mode after nonblocking")
	}
	s.Resume()
	c2, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case c := <-accepted:
		if c == nil || c.RemoteAddr().String() != c2.LocalAddr().String() {
			t.Fatalf("after Resume, accepted %v; want the client's connection", c)
		}
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted after Resume")
	}
}
