//go:build unix

package forward

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testnet"
)

// pairConn is a backendConn over one end of a TCP pair, as the dialer
// makes it, and the other end.
func pairConn(t *testing.T) (*backendConn, *net.TCPConn) {
	client, server := testnet.TCPPair(t)
	c := &backendConn{Conn: client, stats: &PoolStats{}}
	raw, err := client.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c.raw, c.peekFD = raw, c.peekFunc
	return c, server
}

// A request written in one write is held until its response is read, and
// then written and read in one RawConn.Read: the backend has nothing
// before the read, the whole request after it, and the read returns the
// response.
func TestWriteThenReadHoldsTheRequestForTheRead(t *testing.T) {
	c, backend := pairConn(t)
	req := []byte("GET / HTTP/1.1\r\nHost: b\r\n\r\n")
	c.startRequest(true)
	if n, err := c.Write(req); err != nil || n != len(req) {
		t.Fatalf("write: %d, %v", n, err)
	}
	backend.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := backend.Read(make([]byte, 1)); n != 0 {
		t.Fatal("the request went out before its response was read")
	}
	backend.SetReadDeadline(time.Time{})
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(req))
		io.ReadFull(backend, b)
		got <- b
		backend.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n"))
	}()
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "HTTP/1.1 204 No Content\r\n\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if b := <-got; !bytes.Equal(b, req) {
		t.Fatalf("backend got %q", b)
	}
	// The next request on the connection is held again.
	c.startRequest(true)
	c.Write(req)
	if c.pending == nil {
		t.Fatal("the second request was not held")
	}
}

// A held request the socket does not take whole is finished by a plain
// write; a response that was there before it had all of it marks the
// exchange early (the connection is then not reused).
func TestWriteThenReadFinishesAWriteTheSocketDidNotTake(t *testing.T) {
	c, backend := pairConn(t)
	c.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10)
	backend.SetReadBuffer(64 << 10)
	req := bytes.Repeat([]byte("x"), 256<<10) // more than the two sockets' buffers hold
	c.startRequest(true)
	c.Write(req)
	got := make(chan int, 1)
	go func() {
		backend.Write([]byte("HTTP/1.1 413 Too Large\r\n\r\n")) // before it read the request
		time.Sleep(20 * time.Millisecond)
		n, _ := io.CopyN(io.Discard, backend, int64(len(req)))
		got <- int(n)
	}()
	time.Sleep(10 * time.Millisecond)
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 413")) {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n := <-got; n != len(req) {
		t.Fatalf("backend got %d bytes of %d", n, len(req))
	}
	if !c.early {
		t.Fatal("a response before the whole request was not marked early")
	}
}
