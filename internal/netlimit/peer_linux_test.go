package netlimit

import (
	"crypto/tls"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/testnet"
)

// peeked is how many bytes wait in the socket of raw (up to 64), read
// without taking them.
func peeked(t *testing.T, raw syscall.RawConn) int {
	var n int
	if err := raw.Control(func(fd uintptr) {
		var b [64]byte
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		t.Fatal(err)
	}
	return max(n, 0) // -1 with EAGAIN
}

// TestPeerGone: the probe tells a client that is there, with or without
// bytes waiting, from one that closed (with or without bytes waiting
// before its FIN) or reset, and takes no byte.
func TestPeerGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string // written by the client first
		act  func(c *net.TCPConn)
		gone bool
	}{
		{"idle", "", func(*net.TCPConn) {}, false},
		{"bytes waiting", "POST body", func(*net.TCPConn) {}, false},
		{"closed", "", func(c *net.TCPConn) { c.Close() }, true},
		{"half-closed", "", func(c *net.TCPConn) { c.CloseWrite() }, true},
		{"bytes then closed", "GET /next HTTP/1.1\r\n", func(c *net.TCPConn) { c.Close() }, true},
		{"reset", "", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := testnet.TCPPair(t)
			raw := rawConn(Wrap(server))
			if raw == nil {
				t.Fatal("no socket found under a netlimit.Conn")
			}
			if peerGone(raw) {
				t.Fatal("an open connection was taken for gone")
			}
			io.WriteString(client, tc.data)
			leaktest.WaitFor(t, leaktest.Wait, "the bytes to arrive", func() bool { return peeked(t, raw) == len(tc.data) })
			tc.act(client)
			if tc.gone {
				leaktest.WaitFor(t, leaktest.Wait, "the probe to see the client gone", func() bool { return peerGone(raw) })
			} else if peerGone(raw) {
				t.Fatal("a client still there was taken for gone")
			}
			if got := peeked(t, raw); got != len(tc.data) && tc.name != "reset" {
				t.Fatalf("%d bytes left in the socket; want the %d sent (the probe takes none)", got, len(tc.data))
			}
		})
	}
}

// TestRawConnFindsTheSocket: through every wrapper a fasthttp connection
// comes in (the server's replay of a sniffed h2c preface, TLS), and none
// under a conn without a socket.
func TestRawConnFindsTheSocket(t *testing.T) {
	_, server := testnet.TCPPair(t)
	counted := Wrap(server)
	for name, c := range map[string]net.Conn{
		"counted": counted,
		"replay":  replayConn{counted},
		"tls":     tls.Server(counted, &tls.Config{}),
	} {
		if rawConn(c) == nil {
			t.Errorf("%s: no socket found", name)
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if rawConn(Wrap(a)) != nil {
		t.Error("a pipe has no socket to probe")
	}
}

// replayConn wraps a connection as the server's h2c sniffing does: it
// tells what it wraps by NetConn, as tls.Conn does.
type replayConn struct{ net.Conn }

func (c replayConn) NetConn() net.Conn { return c.Conn }
