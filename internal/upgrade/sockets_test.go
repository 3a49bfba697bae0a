package upgrade

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

type accepted struct {
	c   net.Conn
	err error
}

func acceptOnce(ln net.Listener) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	return ch
}

// A paused gate kicks its Accept out of the kernel and holds new
// connections in the backlog, connected but not accepted; Resume hands
// them over; Close ends a paused Accept.
func TestGatePauseResumeClose(t *testing.T) {
	var s Sockets
	ln, err := s.Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := acceptOnce(ln) // in the kernel when Pause comes, or not yet
	s.Pause()             // returns only once no Accept is in the kernel
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial while paused: %v (a paused socket must not refuse)", err)
	}
	defer c.Close()
	s.Resume()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("Accept after Resume: %v", a.err)
		}
		if a.c.RemoteAddr().String() != c.LocalAddr().String() {
			t.Errorf("accepted %v, want the connection made while paused (%v)", a.c.RemoteAddr(), c.LocalAddr())
		}
		a.c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the connection made while paused was not accepted after Resume")
	}
	s.Pause()
	got = acceptOnce(ln)
	ln.Close()
	select {
	case a := <-got:
		if !errors.Is(a.err, net.ErrClosed) {
			t.Fatalf("paused Accept after Close = %v, want net.ErrClosed", a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a paused Accept")
	}
}

// An engine that accepts from the socket itself (the event loop) is
// paused and resumed with the gate, and paused at once when attached to a
// paused gate.
func TestGateAttach(t *testing.T) {
	var s Sockets
	ln, err := s.Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := ln.(*Gate)
	if g.Listener() == nil || g.Listener().Addr().String() != ln.Addr().String() {
		t.Fatal("Listener is not the gate's socket")
	}
	var log []string
	g.Attach(func() { log = append(log, "pause 1") }, func() { log = append(log, "resume 1") })
	s.Pause()
	s.Pause() // once
	g.Attach(func() { log = append(log, "pause 2") }, func() { log = append(log, "resume 2") })
	s.Resume()
	want := []string{"pause 1", "pause 2", "resume 1", "resume 2"}
	if fmt.Sprint(log) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", log, want)
	}
}

// The sockets a process inherits are taken by name; those not taken are
// closed by CloseUnclaimed.
func TestSocketsTakeInheritedByName(t *testing.T) {
	var old Sockets
	a, err := old.Listen("proxy a", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := old.Listen("proxy b", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	next := inherit(t, &old)
	got, err := next.Listen("proxy a", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Addr().String() != a.Addr().String() {
		t.Errorf("inherited %s, want the old socket %s", got.Addr(), a.Addr())
	}
	next.CloseUnclaimed()
	if len(next.inherited) != 0 {
		t.Errorf("%d sockets left unclaimed", len(next.inherited))
	}
}

// Two listeners of one configured address (127.0.0.1:0, twice) each get
// their own socket back, by the order they are asked for in.
func TestSocketsOfOneAddressKeepTheirOrder(t *testing.T) {
	var old Sockets
	var want []string
	for range 2 {
		ln, err := old.Listen("proxy 127.0.0.1:0", "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		want = append(want, ln.Addr().String())
	}
	next := inherit(t, &old)
	for i := range 2 {
		got, err := next.Listen("proxy 127.0.0.1:0", "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer got.Close()
		if got.Addr().String() != want[i] {
			t.Errorf("listener %d inherited %s, want its old socket %s", i+1, got.Addr(), want[i])
		}
	}
	if len(next.inherited) != 0 {
		t.Errorf("%d sockets left unclaimed", len(next.inherited))
	}
}

// inherit is what a process started by old's upgrade inherits: a copy of
// each of its sockets, by name.
func inherit(t *testing.T, old *Sockets) *Sockets {
	t.Helper()
	names, files, err := old.files()
	if err != nil {
		t.Fatal(err)
	}
	next := &Sockets{inherited: map[string]*net.TCPListener{}}
	for i, name := range names {
		ln, err := net.FileListener(files[i])
		files[i].Close()
		if err != nil {
			t.Fatal(err)
		}
		next.inherited[name] = ln.(*net.TCPListener)
	}
	return next
}
