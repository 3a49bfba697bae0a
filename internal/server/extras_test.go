package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// With a concurrency limit far above max_conns_per_backend, a burst still
// opens at most that many connections to the backend; afterwards, the idle
// pool is reused instead of dialling per request.
func TestUpstreamConnectionsAreBoundedAndReused(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
upstream: {max_conns_per_backend: 3, max_idle_per_backend: 3}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 100, queue: {max_wait: 30s, max_len: 100, target: 1m}}
`, be.addr()))
	const n = 40
	results := make(chan *http.Response, n)
	for range n {
		p.asyncGet("a.test", "/", results)
	}
	waitFor(t, "3 requests at the backend and 37 admitted waiting for a connection", func() bool {
		return be.inflight.Load() == 3 && p.app("a").Limiter.InFlight() == n
	})
	be.open()
	for range n {
		if r := <-results; r.StatusCode != http.StatusOK {
			t.Fatalf("status %d", r.StatusCode)
		}
	}
	if got := be.conns.Load(); got > 3 {
		t.Fatalf("levee opened %d connections to one backend; max_conns_per_backend is 3", got)
	}
	if got := be.peak.Load(); got != 3 {
		t.Fatalf("backend peak concurrency %d; want 3", got)
	}
	before := be.conns.Load()
	for range 50 {
		readAll(t, p.get("a.test", "/"))
	}
	if got := be.conns.Load(); got != before {
		t.Fatalf("50 sequential requests opened %d new connections; the idle pool should serve them all", got-before)
	}
}

// A client that never finishes its request headers is cut off after
// server.read_header_timeout (slowloris), and never reaches a backend.
func TestReadHeaderTimeoutClosesSlowClients(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	p := startProxy(t, fmt.Sprintf(`
server: {read_header_timeout: 100ms}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
`, be.addr()))
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\nX-Slow: ")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(c) // returns when levee closes the connection
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("levee kept a connection with unfinished headers open")
	}
	if be.arrived.Load() != 0 {
		t.Fatal("an unfinished request reached the backend")
	}
}

func TestAccessLogIsOffByDefaultAndOnWhenConfigured(t *testing.T) {
	be := newGatedBackend(t)
	be.open()
	base := fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be.addr())
	p := startProxy(t, base)
	readAll(t, p.get("a.test", "/quiet"))
	if strings.Contains(p.logs.String(), "/quiet") {
		t.Fatal("a request was logged with the access log off")
	}
	if err := p.srv.Reload(mustParse(t, "log: {access: true}\n"+base)); err != nil {
		t.Fatal(err)
	}
	readAll(t, p.get("a.test", "/loud"))
	if !strings.Contains(p.logs.String(), "path=/loud") || !strings.Contains(p.logs.String(), "status=200") {
		t.Fatalf("access log line missing after enabling it:\n%s", p.logs.String())
	}
}

func TestUnroutedRequestsAreCounted(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be.addr()))
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { readAll(t, p.get("nobody.test", "/")) })
	}
	wg.Wait()
	if got := p.metric("levee_requests_total", map[string]string{"app": "", "code": "404"}); got != 5 {
		t.Fatalf(`levee_requests_total{app="",code="404"} = %v; want 5`, got)
	}
}

// A listener serves the certificate its config's validation loaded: one
// whose file disappears afterwards still binds and serves it (the check
// approved those bytes, and nothing reads the file again until a reload).
// A reload that finds the file gone, or made a FIFO, is refused at once,
// naming the field, and the listener serves on with what it had.
func TestCertificateFileGoneAfterValidation(t *testing.T) {
	if testH2C() {
		t.Skip("a TLS listener; the same on every protocol")
	}
	cert, key, _ := selfSigned(t)
	doc := fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:9]
`, cert, key)
	p := startProxyConfig(t, mustParse(t, doc), func() {
		if err := os.Remove(cert); err != nil {
			t.Fatal(err)
		}
	})
	addr := p.srv.Addrs()[0].String()
	if got, err := servedName(t, addr, "a.test"); err != nil || got != "photos.test" {
		t.Fatalf("the certificate validation loaded: served %q, %v", got, err)
	}
	if _, err := config.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "listen[0].tls.cert") {
		t.Fatalf("a reload's config with the certificate gone: %v; want an error naming listen[0].tls.cert", err)
	}
	if err := syscall.Mkfifo(cert, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := config.Parse([]byte(doc))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "tls.cert: read "+cert+": not a regular file (a FIFO)") {
			t.Fatalf("a reload's config with a FIFO certificate: %v; want tls.cert: not a regular file", err)
		}
	case <-time.After(guard):
		t.Fatalf("reading a FIFO certificate blocked for %v", guard)
	}
	if got, err := servedName(t, addr, "a.test"); err != nil || got != "photos.test" {
		t.Fatalf("after the refused reloads: served %q, %v", got, err)
	}
}
