package h1loop

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testcert"
)

// tlsOptions are Options with a TLS config of a certificate for a.test,
// and the client config that trusts it.
func tlsOptions(t *testing.T, o Options) (Options, *tls.Config) {
	t.Helper()
	certPEM, keyPEM := testcert.PEM(t, "a.test")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	return o, &tls.Config{RootCAs: testcert.Pool(t, certPEM), ServerName: "a.test", NextProtos: []string{"http/1.1"}}
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// The loop serves TLS as it serves plain connections: in order, pipelined,
// held, and with answers larger than the socket takes at once, over TLS
// 1.3 and 1.2.
func TestTLSAnswersInTheLoop(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			h := &testHandler{body: bytes.Repeat([]byte("x"), 300<<10)}
			o, client := tlsOptions(t, Options{})
			client.MaxVersion = version
			_, addr := start(t, h, o)
			c, br := dialTLS(t, addr, client)
			for i := range 2 {
				io.WriteString(c, get(fmt.Sprintf("/a%d", i)))
				if p, body := readAnswer(t, br); p != fmt.Sprintf("/a%d", i) || len(body) != len(h.body) {
					t.Fatalf("answer %d: %q with %d bytes, want /a%d with %d", i, p, len(body), i, len(h.body))
				}
			}
			// Pipelined, a held one among them: its goroutine writes through
			// the session.
			io.WriteString(c, get("/p1")+get("/hold/p2")+get("/p3"))
			for _, p := range []string{"/p1", "/hold/p2", "/p3"} {
				got, body := readAnswer(t, br)
				if got != p || len(body) != len(h.body) {
					t.Fatalf("answer %q with %d bytes, want %q with %d", got, len(body), p, len(h.body))
				}
			}
			if st := c.ConnectionState(); st.Version != version {
				t.Fatalf("version %x, want %x", st.Version, version)
			}
		})
	}
}

// Requests pipelined past the loop's read buffer: the session holds what
// the buffer did not take, where the socket's readiness does not show it,
// and the loop must read it before it waits.
func TestTLSPipelinedPastTheBuffer(t *testing.T) {
	o, client := tlsOptions(t, Options{})
	_, addr := start(t, &testHandler{}, o)
	c, br := dialTLS(t, addr, client)
	const n = 2000 // ~70 bytes each: more than the loop's 64 KiB buffer
	var all strings.Builder
	for i := range n {
		all.WriteString(get(fmt.Sprintf("/r%04d", i)))
	}
	go io.WriteString(c, all.String()) // one write: records of 16 KiB
	for i := range n {
		wantAnswer(t, br, fmt.Sprintf("/r%04d", i))
	}
}

// A request the loop does not take goes to the handler with the plaintext
// read, and the session, which the handler reads and writes over the
// socket it is given.
func TestTLSHandsOffWhatIsNotSimple(t *testing.T) {
	h := &testHandler{handoffs: make(chan handoff, 1)}
	o, client := tlsOptions(t, Options{})
	_, addr := start(t, h, o)
	c, br := dialTLS(t, addr, client)
	post := "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"
	io.WriteString(c, get("/first")+post)
	wantAnswer(t, br, "/first")
	ho := h.handedOff(t)
	if !ho.c.IsTLS() {
		t.Fatal("the handed-off connection is not TLS")
	}
	tc := ho.c.TLSOver(ho.nc)
	defer tc.Close()
	rest := make([]byte, len(post)-len(ho.in))
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(tc, rest); err != nil {
		t.Fatalf("reading the rest of the request through the session: %v", err)
	}
	if got := string(ho.in) + string(rest); got != post {
		t.Fatalf("the handler read %q, want %q", got, post)
	}
	io.WriteString(tc, "HTTP/1.1 204 No Content\r\nX-Path: /up\r\n\r\n")
	wantAnswer(t, br, "/up")
}

// A connection whose ALPN protocol is not HTTP/1.1 is the handler's once
// its handshake is done.
func TestTLSHandsOffOtherProtocols(t *testing.T) {
	h := &testHandler{handoffs: make(chan handoff, 1)}
	o, client := tlsOptions(t, Options{})
	s, addr := start(t, h, o)
	client.NextProtos = []string{"h2"}
	c, _ := dialTLS(t, addr, client)
	ho := h.handedOff(t)
	if ho.in != nil || ho.c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("handed off with %q, protocol %q; want nothing read, h2", ho.in, ho.c.ConnectionState().NegotiatedProtocol)
	}
	tc := ho.c.TLSOver(ho.nc)
	defer tc.Close()
	io.WriteString(tc, "hello")
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v through the handed-off session", got, err)
	}
	if s.Open() != 0 {
		t.Fatalf("the loops count %d connections, want 0", s.Open())
	}
}

// A client that does not finish its handshake within HeadTimeout is
// closed; Close ends the handshakes under way (the test's cleanup fails
// if Serve does not return).
func TestTLSHandshakeIsBounded(t *testing.T) {
	h := &testHandler{}
	o, _ := tlsOptions(t, Options{HeadTimeout: 200 * time.Millisecond})
	s, addr := start(t, h, o)
	c, _ := dial(t, addr)
	var err error
	begun := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a silent client's connection was not closed")
	}
	if d := time.Since(begun); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
	waitFor(t, "the closed count", func() bool { return h.closed.Load() == 1 && s.Open() == 0 })

	// The client stays until the server's cleanup (registered after) has
	// closed it, with the default HeadTimeout of 10 s.
	var silent net.Conn
	t.Cleanup(func() {
		if silent != nil {
			silent.Close()
		}
	})
	o, _ = tlsOptions(t, Options{})
	s2, addr2 := start(t, h, o)
	if silent, err = net.Dial("tcp", addr2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection", func() bool { return s2.Open() == 1 })
}

// A bad record after the handshake closes the connection, and nothing of
// it reaches the handler.
func TestTLSBadRecordCloses(t *testing.T) {
	h := &testHandler{}
	o, client := tlsOptions(t, Options{})
	s, addr := start(t, h, o)
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Client(raw, client)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte{23, 3, 3, 0, 20}) // application data: 20 bytes of garbage
	raw.Write(bytes.Repeat([]byte{0xAA}, 20))
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(raw); err != nil {
		t.Fatalf("reading to the close: %v", err)
	}
	waitFor(t, "the close", func() bool { return s.Open() == 0 && h.closed.Load() == 1 })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(end) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
