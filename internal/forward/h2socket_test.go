package forward

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testnet"
)

// socketPair is an h2Socket over one end of a TCP connection on loopback,
// and the other end.
func socketPair(t *testing.T) (*h2Socket, net.Conn) {
	t.Helper()
	nc, peer := testnet.TCPPair(t)
	// Small kernel buffers: a peer that reads nothing stops the writes soon.
	nc.SetWriteBuffer(4 << 10)
	peer.SetReadBuffer(4 << 10)
	stats := &PoolStats{}
	stats.open.Add(1)
	bc := &backendConn{Conn: nc, stats: stats}
	bc.io.Init(nc) // as the dialer does
	s := newH2Socket(bc, 0)
	t.Cleanup(func() { s.Close() })
	return s, peer
}

// TestH2SocketWritesInOrder: what writers hand the socket, from many
// goroutines at once, reaches the peer whole and each writer's in order.
func TestH2SocketWritesInOrder(t *testing.T) {
	s, peer := socketPair(t)
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Write([]byte{byte(w), byte(i), byte(i >> 8)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := make([]byte, 3*writers*each)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	for p := got; len(p) > 0; p = p[3:] {
		w, i := int(p[0]), int(p[1])|int(p[2])<<8
		if w >= writers || i != next[w] {
			t.Fatalf("writer %d's write %d arrived, want its %d", w, i, next[w])
		}
		next[w]++
	}
}

// TestH2SocketBoundsWhatGathers: against a peer that reads nothing,
// writers wait once the buffer is past its bound (what is not written
// stays bounded), and Close ends them, and itself returns, within the
// linger.
func TestH2SocketBoundsWhatGathers(t *testing.T) {
	s, _ := socketPair(t)
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	blocked := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Write(chunk); err != nil {
				blocked <- err
				return
			}
		}
	}()
	// The kernel's buffers fill, then the socket's: a writer waits.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := s.unsent
		s.mu.Unlock()
		if n >= h2SocketBuffer {
			break
		}
		select {
		case err := <-blocked:
			t.Fatalf("a write failed before the socket reached its bound (%d bytes unsent): %v", n, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the socket never reached its bound: %d bytes unsent", n)
		}
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	if n := s.unsent; n >= h2SocketBuffer+len(chunk) {
		t.Errorf("%d bytes unsent, want less than the bound and one write (%d)", n, h2SocketBuffer+len(chunk))
	}
	s.mu.Unlock()
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return against a peer that reads nothing")
	}
	if err := <-blocked; !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the waiting writer got %v, want the socket's end", err)
	}
	if !s.bc.closed.Load() {
		t.Fatal("the connection is still open")
	}
}

// TestH2SocketErrorIsSticky: once a write to the peer fails, the socket
// closes and every later Write fails.
func TestH2SocketErrorIsSticky(t *testing.T) {
	s, peer := socketPair(t)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close() // a reset for what comes next
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Write([]byte("ping")); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a reset connection go on succeeding")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Write([]byte("ping")); err == nil {
		t.Fatal("a write after the failure succeeded")
	}
	if !s.bc.closed.Load() {
		t.Fatal("the failed socket was not closed")
	}
}
