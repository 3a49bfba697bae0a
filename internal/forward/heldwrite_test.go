package forward

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// heldPair dials a backendConn to a loopback listener and returns it with
// the backend's side of the connection.
func heldPair(t *testing.T) (*backendConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := newFastDialer(config.Default().Upstream).dialPooled(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if c.io.RawConn() == nil {
		t.Fatal("a TCP backend connection has no RawConn: nothing would be held")
	}
	return c, b
}

// nothingArrives fails if b can read anything within a while.
func nothingArrives(t *testing.T, b net.Conn, what string) {
	t.Helper()
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var one [1]byte
	if n, err := b.Read(one[:]); n > 0 || !isTimeout(err) {
		t.Fatalf("%s: the backend read %d bytes (%v) before levee read the response", what, n, err)
	}
	b.SetReadDeadline(time.Time{})
}

// A request's one write goes out with the response's first read, which
// then gets the answer: the write is held, not lost, and not sent twice.
func TestHeldWriteGoesOutWithTheRead(t *testing.T) {
	c, b := heldPair(t)
	for i := range 3 { // and again on the same connection
		req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.startRequest()
		c.holdLastWrite()
		if n, err := c.Write(req); n != len(req) || err != nil {
			t.Fatalf("round %d: held Write = %d, %v", i, n, err)
		}
		nothingArrives(t, b, "held write")
		answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		got := make(chan []byte, 1)
		go func() {
			buf := make([]byte, len(req))
			if _, err := io.ReadFull(b, buf); err != nil {
				got <- nil
				return
			}
			got <- buf
			b.Write(answer)
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], answer) {
			t.Fatalf("round %d: Read = %q, %v; want %q", i, buf[:n], err, answer)
		}
		if r := <-got; !bytes.Equal(r, req) {
			t.Fatalf("round %d: the backend got %q; want %q", i, r, req)
		}
		c.dropHeld()
	}
}

// A request written in more than one write is not held: its first write
// goes out at once, and the rest as usual (an early answer could be on the
// socket already, and a held write's read would not see it).
func TestOnlyAOneWriteRequestIsHeld(t *testing.T) {
	c, b := heldPair(t)
	c.startRequest()
	if _, err := c.Write([]byte("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.holdLastWrite()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if c.pending != nil {
		t.Fatal("the second write of a request was held")
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	want := "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != want {
		t.Fatalf("backend read %q, %v; want %q", buf, err, want)
	}
}

// A held write larger than the socket takes at once goes out in full
// before the response is read.
func TestHeldWriteLargerThanTheSocketBuffer(t *testing.T) {
	c, b := heldPair(t)
	req := bytes.Repeat([]byte("x"), 16<<20)
	c.startRequest()
	c.holdLastWrite()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		n, err := io.CopyN(io.Discard, b, int64(len(req)))
		if err == nil {
			_, err = b.Write([]byte("ok"))
		} else {
			err = fmt.Errorf("the backend read %d bytes: %w", n, err)
		}
		done <- err
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 8)
	n, err := io.ReadFull(c, buf[:2])
	if err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("Read = %q, %v; want ok", buf[:n], err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A held request whose answer does not come in time fails the read with a
// timeout; one whose backend has gone fails it with an error.
func TestHeldWriteErrors(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		c, b := heldPair(t)
		c.startRequest()
		c.holdLastWrite()
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 16)); !isTimeout(err) {
			t.Fatalf("Read = %v; want a timeout", err)
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 18)
		if _, err := io.ReadFull(b, buf); err != nil {
			t.Fatalf("the request did not go out before the wait: %v", err)
		}
	})
	t.Run("backend closed", func(t *testing.T) {
		c, b := heldPair(t)
		b.Close()
		c.startRequest()
		c.holdLastWrite()
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 16))
		if n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("Read = %d, %v; want an end or an error, at once", n, err)
		}
	})
}
