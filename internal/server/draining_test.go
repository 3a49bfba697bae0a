package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testcert"
)

// A TLS connection accepted before the drain whose handshake ends after
// it began gets 503 draining as the answer to its request, not before
// it: a client that has not sent its request yet takes an answer for
// none (Go's: "Unsolicited response received on idle HTTP channel").
func TestDrainingAnswersTheRequestAfterTheHandshake(t *testing.T) {
	be := newGatedBackend(t)
	cert, key := testcert.Files(t, "a.test")
	p := startProxy(t, fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, cert, key, be.addr()))
	defer be.open() // before the proxy's cleanup, which drains
	addr := p.srv.Addrs()[0].String()
	tlsConf := &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}
	first, err := tls.Dial("tcp", addr, tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	io.WriteString(first, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
	waitFor(t, "the first request at the backend", func() bool { return be.inflight.Load() == 1 })

	l := p.srv.listeners[0]
	open := l.ln.Open()
	late, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	waitFor(t, "the late connection accepted", func() bool { return l.ln.Open() > open })
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop() }()
	waitFor(t, "the drain to begin", func() bool {
		if l.loop != nil { // the event loops accept and sort TLS connections
			return p.srv.draining.Load()
		}
		select {
		case <-l.h1q.done: // the sorter's queue
			return true
		default:
			return false
		}
	})
	tc := tls.Client(late, tlsConf)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// Nothing comes before the request; the pass does not depend on how
	// long this waits (no answer can come), the failure is at once.
	tc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if b, err := tc.Read(make([]byte, 256)); b > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes (%v) after the handshake, before any request; want none", b, err)
	}
	tc.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(tc); !strings.HasPrefix(string(b), "HTTP/1.1 503") || !strings.Contains(string(b), "Levee-Reject: draining") {
		t.Fatalf("the request read %q, %v; want 503 draining", b, err)
	}
	be.open()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// AwaitFirstRequests waits for every open connection's first request:
// one silent until its ctx ends is counted, and once that connection has
// sent a request, and a TLS one has shaken hands and sent its own, there
// is none to wait for. A kept connection is never waited for again.
func TestAwaitFirstRequests(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	cert, key := testcert.Files(t, "a.test")
	p := startProxy(t, fmt.Sprintf(`
listen: [127.0.0.1:0, {addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, cert, key, strings.TrimPrefix(backend.URL, "http://")))
	await := func(d time.Duration) int64 {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		return p.srv.AwaitFirstRequests(ctx)
	}
	if n := await(10 * time.Second); n != 0 {
		t.Fatalf("%d connections waited for before any was opened", n)
	}
	plain, err := net.Dial("tcp", p.srv.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tlsConf := &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}
	secure, err := tls.Dial("tcp", p.srv.Addrs()[1].String(), tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Close()
	// Both accepted (the TLS one has shaken hands), neither has sent a
	// request: the wait runs to its end, however long that is.
	waitFor(t, "both connections accepted", func() bool { return await(time.Millisecond) == 2 })
	get := func(c net.Conn) {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get(plain)
	if n := await(20 * time.Millisecond); n != 1 {
		t.Fatalf("%d connections waited for with one of two silent, want 1", n)
	}
	get(secure)
	if n := await(10 * time.Second); n != 0 {
		t.Fatalf("%d connections waited for once both had sent a request, want 0", n)
	}
}
