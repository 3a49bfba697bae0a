package upgrade

import (
	"net"
	"syscall"
	"testing"
)

// A connection accepted on a socket levee bound has net's keep-alive
// without net setting it per connection (it is the listening socket's),
// and one accepted on an inherited copy of that socket, whose accepts net
// sets it on, has the same.
func TestAcceptedConnectionsKeepAlive(t *testing.T) {
	var s Sockets
	ln, err := s.Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fresh := acceptedOptions(t, ln, ln.Addr().String())

	f, err := s.bound[0].ln.File() // as an upgrade hands it to the new process
	if err != nil {
		t.Fatal(err)
	}
	inherited, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer inherited.Close()
	if got := acceptedOptions(t, inherited, ln.Addr().String()); got != fresh {
		t.Errorf("keep-alive on an inherited socket's connections %+v, on a fresh one's %+v: want the same", got, fresh)
	}
	want := keepAlive{On: 1, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}
	if fresh != want {
		t.Errorf("keep-alive of an accepted connection %+v, want %+v", fresh, want)
	}
	// The listening socket carries it: what accepts copy, where net sets
	// nothing per connection.
	if got := options(t, s.bound[0].ln); got != want {
		t.Errorf("keep-alive of the listening socket %+v, want %+v", got, want)
	}
}

type keepAlive struct{ On, Idle, Interval, Count int }

// acceptedOptions dials addr, accepts the connection on ln and reads its
// keep-alive options.
func acceptedOptions(t *testing.T, ln net.Listener, addr string) keepAlive {
	t.Helper()
	got := acceptOnce(ln)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.c.Close()
	return options(t, a.c.(syscall.Conn))
}

// options reads c's keep-alive options.
func options(t *testing.T, c syscall.Conn) keepAlive {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var k keepAlive
	var gerr error
	raw.Control(func(fd uintptr) {
		get := func(level, opt int) int {
			v, err := syscall.GetsockoptInt(int(fd), level, opt)
			if err != nil && gerr == nil {
				gerr = err
			}
			return v
		}
		k = keepAlive{On: get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE), Idle: get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE),
			Interval: get(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL), Count: get(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)}
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return k
}
