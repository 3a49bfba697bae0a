package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testnet"
)

func rawPair(t *testing.T) (*Conn, *net.TCPConn) {
	t.Helper()
	a, b := testnet.TCPPair(t)
	var s Conn
	if !s.Init(a) && runtime.GOOS == "linux" {
		t.Fatal("Init found no RawConn on a TCP connection")
	}
	return &s, b
}

// Reads and writes carry bytes as net's do: whole writes, reads of what
// is there, io.EOF at the peer's close.
func TestReadWrite(t *testing.T) {
	s, b := rawPair(t)
	msg := bytes.Repeat([]byte("levee "), 1000)
	go func() {
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(b, buf); err != nil {
			return
		}
		b.Write(buf)
		b.Close()
	}()
	if n, err := s.Write(msg); n != len(msg) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got, err := io.ReadAll(readerFunc(s.Read))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read back %d bytes, %v; want the %d written", len(got), err, len(msg))
	}
	if n, err := s.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close = %d, %v; want io.EOF", n, err)
	}
	if n, err := s.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// A read that waits past its deadline fails as net's does: a timeout
// (os.ErrDeadlineExceeded, net.Error.Timeout) named "read"; one on a
// closed connection fails with net.ErrClosed.
func TestErrorsAreNets(t *testing.T) {
	s, _ := rawPair(t)
	s.c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err := s.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline = %v; want a timeout", err)
	}
	if oe, ok := errors.AsType[*net.OpError](err); !ok || oe.Op != "read" {
		t.Fatalf("Read's error %#v; want a *net.OpError of op read", err)
	}
	s.c.Close()
	if _, err := s.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a closed connection = %v; want net.ErrClosed", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed connection = %v; want net.ErrClosed", err)
	}
}

// Writes from many goroutines at once never interleave, and a write larger
// than the socket takes at once waits for the peer, as net's do.
func TestConcurrentWritesStayWhole(t *testing.T) {
	s, b := rawPair(t)
	const writers, each, size = 8, 20, 256 << 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			msg := bytes.Repeat([]byte{'a' + byte(w)}, size)
			for range each {
				if _, err := s.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	buf := make([]byte, size)
	for i := range writers * each {
		if _, err := io.ReadFull(b, buf); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if bytes.Count(buf, buf[:1]) != size {
			t.Fatalf("message %d is not one writer's: writes interleaved", i)
		}
	}
	wg.Wait()
}

// SendRead writes what it holds, then reads the answer; a held write the
// socket does not take whole goes out in full before the read.
func TestSendRead(t *testing.T) {
	for _, size := range []int{16, 16 << 20} {
		s, b := rawPair(t)
		held := bytes.Repeat([]byte("q"), size)
		go func() {
			if _, err := io.CopyN(io.Discard, b, int64(size)); err == nil {
				b.Write([]byte("answer"))
			}
		}()
		s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 16)
		n, err := s.SendRead(held, buf)
		if err != nil {
			t.Fatalf("%d held: SendRead: %v", size, err)
		}
		got := append([]byte(nil), buf[:n]...)
		if n < 6 {
			rest := make([]byte, 6-n)
			if _, err := io.ReadFull(readerFunc(s.Read), rest); err != nil {
				t.Fatal(err)
			}
			got = append(got, rest...)
		}
		if string(got) != "answer" {
			t.Fatalf("%d held: read %q; want answer", size, got)
		}
	}
}

// A held write to a peer that has gone fails SendRead with an error, not
// a wait until the deadline.
func TestSendReadToAClosedPeer(t *testing.T) {
	s, b := rawPair(t)
	b.SetLinger(0)
	b.Close() // a reset: the write fails
	time.Sleep(10 * time.Millisecond)
	s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err := s.SendRead([]byte("GET / HTTP/1.1\r\n\r\n"), make([]byte, 8))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("SendRead to a reset peer = %v (after %v); want its error", err, time.Since(start))
	}
}

// A connection without a RawConn (net.Pipe) is passed through.
func TestPassThrough(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var s Conn
	if s.Init(a) {
		t.Fatal("Init found a RawConn on a pipe")
	}
	go func() {
		buf := make([]byte, 5)
		io.ReadFull(b, buf)
		b.Write([]byte("world"))
	}()
	buf := make([]byte, 5)
	n, err := s.SendRead([]byte("hello"), buf)
	if err != nil || string(buf[:n]) != "world" {
		t.Fatalf("SendRead through a pipe = %q, %v", buf[:n], err)
	}
}

// Peek sees nothing, then bytes (which a read still gets), then the
// peer's close, consuming nothing.
func TestPeek(t *testing.T) {
	s, b := rawPair(t)
	var fd uintptr
	s.raw.Control(func(f uintptr) { fd = f })
	one := make([]byte, 1)
	if n, errno := Peek(fd, one); errno != syscall.EAGAIN {
		t.Fatalf("Peek of an empty socket = %d, %v; want EAGAIN", n, errno)
	}
	b.Write([]byte("x"))
	waitPeek(t, fd, func(n int, errno syscall.Errno) bool { return n == 1 && errno == 0 })
	if n, err := s.Read(one); n != 1 || err != nil || one[0] != 'x' {
		t.Fatalf("Read after Peek = %q, %v; want the peeked byte", one[:n], err)
	}
	b.Close()
	waitPeek(t, fd, func(n int, errno syscall.Errno) bool { return n == 0 && errno == 0 })
}

// waitPeek peeks until ok (the peer's bytes take a moment over loopback).
func waitPeek(t *testing.T, fd uintptr, ok func(int, syscall.Errno) bool) {
	t.Helper()
	one := make([]byte, 1)
	for range 1000 {
		if n, errno := Peek(fd, one); ok(n, errno) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("Peek never saw what was sent")
}

// Bytes sent through a socket order what their writer did before them
// before what their reader does after them, for the race detector too
// (race.go), both ways: without that, this test fails under -race.
func TestIOOrdersMemoryForTheRaceDetector(t *testing.T) {
	s, b := rawPair(t)
	one := make([]byte, 1)
	var x, y int
	go func() {
		x = 1
		s.Write([]byte{1})
	}()
	if _, err := io.ReadFull(b, one); err != nil || x != 1 {
		t.Fatalf("read %v, x = %d", err, x)
	}
	go func() {
		y = 2
		b.Write([]byte{2})
	}()
	if _, err := s.Read(one); err != nil || y != 2 {
		t.Fatalf("read %v, y = %d", err, y)
	}
}
