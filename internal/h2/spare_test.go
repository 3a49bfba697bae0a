package h2

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// Handlers of streams one after another on a connection run on a few kept
// goroutines, not one new goroutine each; a kept goroutine left idle ends.
func TestHandlersReuseGoroutines(t *testing.T) {
	var mu sync.Mutex
	ran := map[uint64]int{}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ran[goroutineID()]++
		mu.Unlock()
		io.WriteString(w, "ok")
	})}
	addr := serve(t, s)
	rc := dialRaw(t, addr)
	const requests = 50
	for i := range uint32(requests) {
		id := 2*i + 1
		rc.get(id, "/", true)
		if status, _ := rc.response(id, nil); status != "200" {
			t.Fatalf("stream %d: status %s", id, status)
		}
	}
	mu.Lock()
	n := len(ran)
	mu.Unlock()
	// A handler's goroutine parks once its response is out, so the next
	// request may come first and start another, up to maxSpares+1 kept;
	// one that idled spareIdle ends (a very slow machine): half is far
	// from one per request.
	if n > requests/2 {
		t.Fatalf("%d requests ran on %d goroutines, want few: handlers' goroutines are not kept", requests, n)
	}
	t.Logf("%d requests ran on %d goroutines", requests, n)

	c := onlyConn(t, s)
	deadline := time.Now().Add(guard)
	for {
		c.spares.mu.Lock()
		parked := c.spares.n
		c.spares.mu.Unlock()
		if parked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still parked %v after the last request, want none after %v idle", parked, guard, spareIdle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onlyConn is s's one connection.
func onlyConn(t *testing.T, s *Server) *conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(s.conns))
	}
	for c := range s.conns {
		return c
	}
	return nil
}
