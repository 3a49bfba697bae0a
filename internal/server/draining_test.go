package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
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
	waitFor(t, "the HTTP/1.1 engine's queue closed", func() bool {
		select {
		case <-l.h1q.done:
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
