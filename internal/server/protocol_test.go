package server

// End-to-end protocol tests: a real levee on loopback, real backends
// (httptest servers, some hijacking to speak raw HTTP) and real clients
// (net/http, or raw TCP where net/http would hide what is on the wire).
//
// Nothing here measures time. Where a test must show that levee does not
// buffer, the backend blocks until the test has seen the first part, so a
// buffering proxy deadlocks; guard turns that deadlock into a failure.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// guard bounds every wait on levee. It is never a pass/fail threshold: a
// correct levee answers in microseconds, a buffering or stuck one never.
const guard = 10 * time.Second

// recv returns the next value from ch, failing the test if none comes within guard.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v (is levee buffering, or stuck?)", what, guard)
		panic("unreachable")
	}
}

// newBackend starts a loopback HTTP/1.1 backend and returns its host:port.
func newBackend(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// gate is a release the test controls: handlers block in wait until open.
// open is idempotent; tests defer it so a failing test never strands a handler.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens or r's client goes away; it reports which.
func (g *gate) wait(r *http.Request) bool {
	select {
	case <-g.ch:
		return true
	case <-r.Context().Done():
		return false
	}
}

// photosApp is a one-app config for host photos.test; extra is appended
// verbatim (top-level keys such as listen: or server:).
func photosApp(backend, limits, extra string) string {
	cfg := fmt.Sprintf("apps:\n  photos:\n    hosts: [photos.test]\n    backends: [%s]\n", backend)
	if limits != "" {
		cfg += "    limits: " + limits + "\n"
	}
	return cfg + extra
}

// newClient returns a client over tr whose idle connections close with the test.
func newClient(t *testing.T, tr *http.Transport) *http.Client {
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func h2cOnly() *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return p
}

func http1Only() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return p
}

// --- 1. HTTP/1.1 pass-through ---------------------------------------------

// seenRequest is what a backend saw of one request.
type seenRequest struct {
	method, uri, host, proto string
	body                     []byte
	header                   http.Header
}

func record(r *http.Request) seenRequest {
	body, _ := io.ReadAll(r.Body)
	return seenRequest{method: r.Method, uri: r.RequestURI, host: r.Host, proto: r.Proto, body: body, header: r.Header.Clone()}
}

func TestHTTP1PassThrough(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		s := record(r)
		seen <- s
		h := w.Header()
		h.Set("X-Backend", "photos-1")
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("Cache-Control", "no-store")
		code, _ := strconv.Atoi(r.Header.Get("X-Want-Status"))
		w.WriteHeader(code)
		if r.Method != http.MethodHead && code != http.StatusNoContent {
			fmt.Fprintf(w, "%s %s|", r.Method, r.RequestURI)
			w.Write(s.body)
		}
	})
	p := startProxy(t, photosApp(backend, "", ""))
	client := newClient(t, &http.Transport{})

	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB: several copy buffers
	for _, tc := range []struct {
		method, target string
		body           []byte
		status         int
	}{
		{http.MethodGet, "/", nil, http.StatusOK},
		{http.MethodGet, "/albums/7?size=large&sort=-date", nil, http.StatusOK},
		{http.MethodPost, "/a%2Fb/c?x=1&y=%20z&x=2", []byte("small body"), http.StatusCreated},
		{http.MethodPut, "/upload", big, http.StatusOK},
		{http.MethodPatch, "/albums/7", []byte(`{"title":"x"}`), http.StatusNoContent},
		{http.MethodDelete, "/albums/8", nil, http.StatusNotFound}, // the backend's 404, not levee's
		{http.MethodHead, "/albums/7", nil, http.StatusOK},
		{"PROPFIND", "/dav/", []byte("<propfind/>"), 207},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, p.URL+tc.target, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "photos.test"
			req.Header.Set("X-Want-Status", strconv.Itoa(tc.status))
			req.Header.Set("X-Client", "kept")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			s := recv(t, seen, "backend request")

			if s.method != tc.method || s.uri != tc.target || s.host != "photos.test" {
				t.Errorf("backend saw %s %s Host=%q, want %s %s Host=photos.test", s.method, s.uri, s.host, tc.method, tc.target)
			}
			if !bytes.Equal(s.body, tc.body) {
				t.Errorf("backend got a %d-byte body, want %d bytes", len(s.body), len(tc.body))
			}
			if got := s.header.Get("X-Client"); got != "kept" {
				t.Errorf("backend X-Client = %q, want kept", got)
			}
			if s.proto != "HTTP/1.1" {
				t.Errorf("backend saw %s, want HTTP/1.1", s.proto)
			}

			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("X-Backend"); got != "photos-1" {
				t.Errorf("X-Backend = %q, want photos-1", got)
			}
			if got := resp.Header.Values("Set-Cookie"); len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
				t.Errorf("Set-Cookie = %q, want [a=1 b=2]", got)
			}
			if got := resp.Header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control = %q", got)
			}
			for _, h := range []string{"Levee-Error", "Levee-Reject"} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("%s: %s on a backend response", h, v)
				}
			}
			want := ""
			if tc.method != http.MethodHead && tc.status != http.StatusNoContent {
				want = tc.method + " " + tc.target + "|" + string(tc.body)
			}
			if body != want {
				t.Errorf("body: got %d bytes, want %d (%.40q...)", len(body), len(want), want)
			}
		})
	}
}

// --- 2. Hop-by-hop headers ------------------------------------------------

var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade", "X-Foo", "Proxy-Authenticate"}

// rawExchange writes raw to addr and returns a reader positioned at the
// response, and the connection (closed when the test ends).
func rawExchange(t *testing.T, addr, raw string) (*bufio.Reader, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(guard))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(conn), conn
}

func TestHopByHopRequestHeadersRemoved(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		s := record(r)
		s.header["Transfer-Encoding"] = r.TransferEncoding // as the backend's parser framed it
		seen <- s
		io.WriteString(w, "ok")
	})
	p := startProxy(t, photosApp(backend, "", ""))
	addr := strings.TrimPrefix(p.URL, "http://")

	br, _ := rawExchange(t, addr, "POST /hop HTTP/1.1\r\n"+
		"Host: photos.test\r\n"+
		"Connection: keep-alive, X-Foo\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"TE: deflate\r\n"+
		"Upgrade: websocket\r\n"+ // without Connection: upgrade this is not an upgrade
		"X-Foo: named-in-connection\r\n"+
		"X-Keep: end-to-end\r\n"+
		"Transfer-Encoding: chunked\r\n"+
		"\r\n"+
		"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("response %d %q, want 200 ok", resp.StatusCode, body)
	}

	s := recv(t, seen, "backend request")
	for _, h := range hopByHop {
		if v, ok := s.header[h]; ok {
			t.Errorf("backend got hop-by-hop %s: %q", h, v)
		}
	}
	if got := s.header.Get("X-Keep"); got != "end-to-end" {
		t.Errorf("backend X-Keep = %q, want end-to-end", got)
	}
	// The client's chunking is framing on the client hop; levee re-frames
	// the body for its own hop (chunked again: the length is unknown).
	if got := s.header["Transfer-Encoding"]; len(got) > 1 {
		t.Errorf("backend saw Transfer-Encoding %q: the client's framing leaked as a header", got)
	}
	if string(s.body) != "hello world" {
		t.Errorf("backend body %q, want %q", s.body, "hello world")
	}
}

// TE: trailers is the one TE value a proxy passes on (ReverseProxy's rule,
// needed by gRPC); anything else in TE is dropped.
func TestTETrailersIsKept(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) { seen <- record(r) })
	p := startProxy(t, photosApp(backend, "", ""))
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
	req.Host = "photos.test"
	req.Header.Set("TE", "trailers, deflate")
	resp, err := newClient(t, &http.Transport{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := recv(t, seen, "backend request").header.Values("Te"); len(got) != 1 || got[0] != "trailers" {
		t.Errorf("backend Te = %q, want [trailers]", got)
	}
}

func TestHopByHopResponseHeadersRemoved(t *testing.T) {
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// Hijack to put on the wire exactly what a careless backend might send.
		// Not "Connection: close, X-Foo": net/http's Transport deletes a
		// Connection header holding "close" before ReverseProxy reads the
		// tokens, so X-Foo would leak (a stdlib limitation, not tested here).
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\n" +
			"Connection: keep-alive, X-Foo\r\n" +
			"Keep-Alive: timeout=5, max=100\r\n" +
			"Proxy-Connection: keep-alive\r\n" +
			"Proxy-Authenticate: Basic realm=x\r\n" +
			"TE: trailers\r\n" +
			"Upgrade: websocket\r\n" + // a 200, not a 101: no upgrade happened
			"X-Foo: named-in-connection\r\n" +
			"X-Keep: end-to-end\r\n" +
			"Transfer-Encoding: chunked\r\n" +
			"\r\n" +
			"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n")
		brw.Flush()
	})
	p := startProxy(t, photosApp(backend, "", ""))
	addr := strings.TrimPrefix(p.URL, "http://")

	// Read levee's response raw: net/http would hide Transfer-Encoding.
	br, _ := rawExchange(t, addr, "GET /hop HTTP/1.1\r\nHost: photos.test\r\n\r\n")
	tp := textproto.NewReader(br)
	status, err := tp.ReadLine()
	if err != nil {
		t.Fatal(err)
	}
	if status != "HTTP/1.1 200 OK" {
		t.Fatalf("status line %q", status)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hopByHop {
		if v, ok := hdr[h]; ok {
			t.Errorf("client got hop-by-hop %s: %q", h, v)
		}
	}
	if got := hdr.Get("X-Keep"); got != "end-to-end" {
		t.Errorf("client X-Keep = %q, want end-to-end", got)
	}
	// levee frames the body itself: one chunked coding, or a length, never
	// the backend's header copied beside its own.
	var body []byte
	switch te := hdr.Values("Transfer-Encoding"); {
	case len(te) == 1 && te[0] == "chunked" && hdr.Get("Content-Length") == "":
		body, err = io.ReadAll(httputil.NewChunkedReader(br))
	case len(te) == 0:
		n, perr := strconv.Atoi(hdr.Get("Content-Length"))
		if perr != nil {
			t.Fatalf("no framing: Content-Length %q", hdr.Get("Content-Length"))
		}
		body = make([]byte, n)
		_, err = io.ReadFull(br, body)
	default:
		t.Fatalf("bad framing: Transfer-Encoding %q, Content-Length %q", te, hdr.Get("Content-Length"))
	}
	if err != nil || string(body) != "hello world" {
		t.Errorf("body %q (%v), want %q", body, err, "hello world")
	}
}

// --- 3. X-Forwarded-* and Forwarded ---------------------------------------

func TestForwardedHeaders(t *testing.T) {
	forged := map[string]string{
		"X-Forwarded-For":   "1.2.3.4",
		"X-Forwarded-Host":  "orig.example",
		"X-Forwarded-Proto": "https",
		"Forwarded":         "for=1.2.3.4;proto=https",
	}
	for _, tc := range []struct {
		name, server string
		want         map[string]string
	}{{
		name: "untrusted peer: forged values replaced",
		want: map[string]string{
			"X-Forwarded-For":   "127.0.0.1",
			"X-Forwarded-Host":  "photos.test",
			"X-Forwarded-Proto": "http",
			"Forwarded":         "for=127.0.0.1;host=photos.test;proto=http",
		},
	}, {
		name:   "trusted peer: chain extended",
		server: "server:\n  trusted_proxies: [127.0.0.0/8]\n",
		want: map[string]string{
			"X-Forwarded-For":   "1.2.3.4, 127.0.0.1",
			"X-Forwarded-Host":  "orig.example",
			"X-Forwarded-Proto": "https",
			"Forwarded":         "for=1.2.3.4;proto=https, for=127.0.0.1;host=photos.test;proto=http",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan seenRequest, 2)
			backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) { seen <- record(r) })
			p := startProxy(t, photosApp(backend, "", tc.server))
			client := newClient(t, &http.Transport{})
			for _, withForged := range []bool{true, false} {
				req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
				req.Host = "photos.test"
				if withForged {
					for k, v := range forged {
						req.Header.Set(k, v)
					}
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				s := recv(t, seen, "backend request")
				want := tc.want
				if !withForged { // nothing to keep: levee's own values whatever the trust
					want = map[string]string{
						"X-Forwarded-For":   "127.0.0.1",
						"X-Forwarded-Host":  "photos.test",
						"X-Forwarded-Proto": "http",
						"Forwarded":         "for=127.0.0.1;host=photos.test;proto=http",
					}
				}
				for k, v := range want {
					if got := s.header.Values(k); len(got) != 1 || got[0] != v {
						t.Errorf("incoming headers %v: backend %s = %q, want [%q]", withForged, k, got, v)
					}
				}
			}
		})
	}
}

// --- 4. Streaming ---------------------------------------------------------

// streamClient is a client and the proxy URL it sends to.
type streamClient struct {
	*http.Client
	URL string
}

// streamingProxy starts levee on a plain listener (HTTP/1.1, on the engine
// under test) and an h2c one, and returns a client for each protocol.
func streamingProxy(t *testing.T, backend, limits string) map[string]streamClient {
	p := startProxy(t, photosApp(backend, limits, "listen: [{addr: 127.0.0.1:0}, {addr: 127.0.0.1:0, h2c: true}]\n"))
	addrs := p.srv.Addrs()
	return map[string]streamClient{
		"http1": {newClient(t, &http.Transport{Protocols: http1Only()}), "http://" + addrs[0].String()},
		"h2c":   {newClient(t, &http.Transport{Protocols: h2cOnly()}), "http://" + addrs[1].String()},
	}
}

func TestStreamingResponse(t *testing.T) {
	type stream struct {
		release *gate
		proto   string
	}
	streams := make(chan *stream, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		s := &stream{release: newGate(), proto: r.Header.Get("X-Proto")}
		streams <- s
		io.WriteString(w, "chunk 1\n")
		http.NewResponseController(w).Flush()
		if !s.release.wait(r) {
			return
		}
		io.WriteString(w, "chunk 2\n")
	})
	for name, client := range streamingProxy(t, backend, "") {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, client.URL+"/stream", nil)
			req.Host = "photos.test"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("headers did not arrive before the backend finished: %v", err)
			}
			defer resp.Body.Close()
			s := recv(t, streams, "backend request")
			defer s.release.open()
			if want := map[string]int{"http1": 1, "h2c": 2}[name]; resp.ProtoMajor != want {
				t.Fatalf("client spoke HTTP/%d, want %d", resp.ProtoMajor, want)
			}

			// The backend is blocked until we open the gate: chunk 1 can
			// only arrive if levee passed it on without waiting for more.
			first := make([]byte, len("chunk 1\n"))
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatalf("first chunk did not arrive while the backend was blocked: %v", err)
			}
			if string(first) != "chunk 1\n" {
				t.Fatalf("first chunk %q", first)
			}
			s.release.open()
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != "chunk 2\n" {
				t.Fatalf("rest %q (%v), want %q", rest, err, "chunk 2\n")
			}
		})
	}
}

func TestStreamingRequestBody(t *testing.T) {
	gotPart1 := make(chan string, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		part1 := make([]byte, len("part 1\n"))
		if _, err := io.ReadFull(r.Body, part1); err != nil {
			t.Errorf("backend reading part 1: %v", err)
			return
		}
		gotPart1 <- string(part1)
		rest, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("backend reading the rest: %v", err)
			return
		}
		fmt.Fprintf(w, "got %q then %q", part1, rest)
	})
	// A body longer than request_buffer streams on after its first
	// request_buffer bytes (none at 0): part 1 is longer than 4 bytes.
	for _, ahead := range []string{"0", "4B"} {
		for name, client := range streamingProxy(t, backend, "{request_buffer: "+ahead+"}") {
			t.Run(name+"/request_buffer="+ahead, func(t *testing.T) { streamRequestBody(t, client, gotPart1) })
		}
	}
}

func streamRequestBody(t *testing.T, client streamClient, gotPart1 chan string) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.CloseWithError(io.ErrUnexpectedEOF) // unblock everything if we fail early
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, client.URL+"/upload", pr)
	req.Host = "photos.test"
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Do(req)
		done <- result{resp, err}
	}()

	if _, err := io.WriteString(pw, "part 1\n"); err != nil {
		t.Fatal(err)
	}
	// Part 2 is not written until the backend has part 1, so a
	// levee that buffered the body would never forward it.
	if got := recv(t, gotPart1, "part 1 at the backend"); got != "part 1\n" {
		t.Fatalf("backend got %q first", got)
	}
	io.WriteString(pw, "part 2\n")
	pw.Close()

	res := recv(t, done, "response")
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := `got "part 1\n" then "part 2\n"`
	if body := readAll(t, res.resp); res.resp.StatusCode != http.StatusOK || body != want {
		t.Fatalf("response %d %q, want 200 %q", res.resp.StatusCode, body, want)
	}
}

// --- 5. Upgrade -----------------------------------------------------------

// isUpgrade reports whether r asks to switch to protocol proto.
func isUpgrade(r *http.Request, proto string) bool {
	conn := false
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			conn = conn || strings.EqualFold(strings.TrimSpace(tok), "upgrade")
		}
	}
	return conn && strings.EqualFold(r.Header.Get("Upgrade"), proto)
}

// echoBackend answers a websocket-style upgrade with 101, greets, then
// echoes each line back prefixed with "echo: " until the peer closes.
func echoBackend(t *testing.T, upgrades *atomic.Int32) string {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if !isUpgrade(r, "websocket") {
			io.WriteString(w, "plain "+r.URL.Path)
			return
		}
		upgrades.Add(1)
		key := r.Header.Get("Sec-WebSocket-Key")
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("backend hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\n"+
			"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: accept(%s)\r\n\r\n", key)
		brw.WriteString("hello from backend\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return // the client closed: close our side too
			}
			brw.WriteString("echo: " + line)
			brw.Flush()
		}
	})
}

func TestUpgradePassThrough(t *testing.T) {
	var upgrades atomic.Int32
	backend := echoBackend(t, &upgrades)
	// One slot and a long queue: the follow-up request below can only be
	// served once the upgraded connection has given its slot back.
	p := startProxy(t, photosApp(backend, "{concurrency: 1, queue: {max_len: 1, max_wait: 30s, target: 1m}}", ""))
	addr := strings.TrimPrefix(p.URL, "http://")

	br, conn := rawExchange(t, addr, "GET /chat HTTP/1.1\r\n"+
		"Host: photos.test\r\n"+
		"Connection: Upgrade\r\n"+
		"Upgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Sec-WebSocket-Version: 13\r\n"+
		"\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	if resp.Header.Get("Upgrade") != "websocket" || !strings.EqualFold(resp.Header.Get("Connection"), "upgrade") {
		t.Errorf("101 headers: Upgrade %q, Connection %q", resp.Header.Get("Upgrade"), resp.Header.Get("Connection"))
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != "accept(dGhlIHNhbXBsZSBub25jZQ==)" {
		t.Errorf("Sec-WebSocket-Accept %q: the handshake headers did not pass through", got)
	}

	// Backend to client, unprompted.
	if line, err := br.ReadString('\n'); err != nil || line != "hello from backend\n" {
		t.Fatalf("greeting %q (%v)", line, err)
	}
	// Both ways, several times.
	for i := range 5 {
		msg := fmt.Sprintf("message %d\n", i)
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "echo: "+msg {
			t.Fatalf("reply %q (%v), want %q", line, err, "echo: "+msg)
		}
	}
	if n := upgrades.Load(); n != 1 {
		t.Errorf("backend saw %d upgrades, want 1", n)
	}

	conn.Close()
	resp = p.get("photos.test", "/after")
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "plain /after" {
		t.Errorf("after the tunnel closed: %d %q (%s), want 200: its concurrency slot was not released",
			resp.StatusCode, body, resp.Header.Get("Levee-Reject"))
	}
}

// An h2c upgrade must not be passed on: once switched, the client would hold
// an opaque tunnel to the backend carrying any number of HTTP/2 requests past
// levee's routing, concurrency limit and forwarding headers (golang/go#80416).
func TestH2CUpgradeNotForwarded(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if isUpgrade(r, "h2c") {
			// A backend that accepts (as x/net/http2/h2c does): 101, then HTTP/2.
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
			brw.Flush()
			return
		}
		seen <- record(r)
		io.WriteString(w, "plain")
	})
	p := startProxy(t, photosApp(backend, "", ""))
	addr := strings.TrimPrefix(p.URL, "http://")
	for _, upgrade := range []string{"h2c", "H2C", "websocket, h2c"} {
		t.Run(upgrade, func(t *testing.T) {
			br, _ := rawExchange(t, addr, "GET / HTTP/1.1\r\n"+
				"Host: photos.test\r\n"+
				"Connection: Upgrade, HTTP2-Settings\r\n"+
				"Upgrade: "+upgrade+"\r\n"+
				"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"+
				"\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "plain" {
				t.Fatalf("response %d %q, want 200 plain (the upgrade served as an ordinary request)", resp.StatusCode, body)
			}
			s := recv(t, seen, "backend request")
			for _, h := range []string{"Upgrade", "Connection", "Http2-Settings"} {
				if v, ok := s.header[h]; ok {
					t.Errorf("backend got %s: %q", h, v)
				}
			}
		})
	}
}

// --- 6. HTTP/2 over TLS, and h2c ------------------------------------------

// selfSigned writes a self-signed ECDSA certificate for photos.test and
// 127.0.0.1 into a temp dir and returns the files and a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "photos.test"},
		DNSNames:              []string{"photos.test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{
		certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

func TestHTTP2(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- record(r)
		io.WriteString(w, "from backend "+r.URL.Path)
	})
	certFile, keyFile, roots := selfSigned(t)
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("listen:\n"+
		"  - {addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}\n"+
		"  - {addr: 127.0.0.1:0, h2c: true}\n"+
		"  - {addr: 127.0.0.1:0}\n", certFile, keyFile)))
	addrs := p.srv.Addrs()
	tlsURL, h2cURL, plainURL := "https://"+addrs[0].String(), "http://"+addrs[1].String(), "http://"+addrs[2].String()
	tlsConf := &tls.Config{RootCAs: roots, ServerName: "photos.test"}

	for _, tc := range []struct {
		name, url string
		tr        *http.Transport
		proto     int
		xfp       string
	}{
		// Each transport gets its own tls.Config: enabling HTTP/2 appends "h2"
		// to the config's NextProtos in place.
		{"h2 over tls", tlsURL, &http.Transport{TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: true}, 2, "https"},
		{"http1 over tls", tlsURL, &http.Transport{TLSClientConfig: tlsConf.Clone(), Protocols: http1Only()}, 1, "https"},
		{"h2c prior knowledge", h2cURL, &http.Transport{Protocols: h2cOnly()}, 2, "http"},
		{"http1 on the h2c listener", h2cURL, &http.Transport{Protocols: http1Only()}, 1, "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, tc.url+"/p/"+strings.ReplaceAll(tc.name, " ", "-"), nil)
			req.Host = "photos.test"
			resp, err := newClient(t, tc.tr).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.ProtoMajor != tc.proto {
				t.Errorf("client spoke %s, want HTTP/%d", resp.Proto, tc.proto)
			}
			if want := "from backend " + req.URL.Path; resp.StatusCode != http.StatusOK || body != want {
				t.Errorf("response %d %q, want 200 %q", resp.StatusCode, body, want)
			}
			s := recv(t, seen, "backend request")
			if s.proto != "HTTP/1.1" || s.host != "photos.test" {
				t.Errorf("backend saw %s Host=%q, want HTTP/1.1 Host=photos.test", s.proto, s.host)
			}
			if got := s.header.Get("X-Forwarded-Proto"); got != tc.xfp {
				t.Errorf("X-Forwarded-Proto %q, want %q", got, tc.xfp)
			}
			if want := "for=127.0.0.1;host=photos.test;proto=" + tc.xfp; s.header.Get("Forwarded") != want {
				t.Errorf("Forwarded %q, want %q", s.header.Get("Forwarded"), want)
			}
		})
	}

	// HTTP/1.1 over TLS is fasthttp's, not net/http's: a request framed two
	// ways (Content-Length and Transfer-Encoding) is refused with 400 there,
	// where net/http would read it by Transfer-Encoding and serve it.
	t.Run("http1 over tls is served by the HTTP/1.1 engine", func(t *testing.T) {
		conn, err := tls.Dial("tcp", addrs[0].String(), &tls.Config{RootCAs: roots, ServerName: "photos.test", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Fatalf("ALPN %q, want http/1.1", p)
		}
		io.WriteString(conn, "POST / HTTP/1.1\r\nHost: photos.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400 from the HTTP/1.1 engine", resp.StatusCode)
		}
	})

	t.Run("no h2c on a plain listener", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, plainURL+"/", nil)
		req.Host = "photos.test"
		resp, err := newClient(t, &http.Transport{Protocols: h2cOnly()}).Do(req)
		if err == nil {
			readAll(t, resp)
			if resp.ProtoMajor == 2 {
				t.Fatal("a listener without h2c: true served HTTP/2")
			}
		}
	})
}

// --- 7. The concurrency limit across HTTP/2 streams -----------------------

func TestConcurrencyLimitAcrossH2Streams(t *testing.T) {
	const streams, limit = 12, 2
	var arrived atomic.Int32
	arrivals := make(chan struct{}, streams)
	release := newGate()
	defer release.open()
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		arrivals <- struct{}{}
		if release.wait(r) {
			io.WriteString(w, "done")
		}
	})
	p := startProxy(t, photosApp(backend, "{concurrency: 2, queue: {max_len: 0}}",
		"listen: [{addr: 127.0.0.1:0, h2c: true}]\n"))

	var dials atomic.Int32
	var d net.Dialer
	client := newClient(t, &http.Transport{
		Protocols: h2cOnly(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	})
	do := func(host string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/slow", nil)
		req.Host = host
		return client.Do(req)
	}
	// Open the one connection with a request no app claims (levee's 404,
	// no backend), so every stream below shares it.
	resp, err := do("nobody.test")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("warm-up: %s %d, want HTTP/2 404", resp.Proto, resp.StatusCode)
	}

	type result struct {
		status             int
		reject, retryAfter string
		err                error
	}
	results := make(chan result, streams)
	for range streams {
		go func() {
			resp, err := do("photos.test")
			if err != nil {
				results <- result{err: err}
				return
			}
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header.Get("Levee-Reject"), resp.Header.Get("Retry-After"), nil}
		}()
	}

	// The first limit streams to be admitted hold their slots in the backend
	// until release opens, so every other stream must be refused at once.
	for range limit {
		recv(t, arrivals, "a stream at the backend")
	}
	for i := range streams - limit {
		r := recv(t, results, "a rejection")
		if r.err != nil {
			t.Fatalf("stream: %v", r.err)
		}
		if r.status != http.StatusServiceUnavailable || r.reject != "queue-full" {
			t.Fatalf("rejection %d: status %d Levee-Reject %q, want 503 queue-full", i, r.status, r.reject)
		}
		if secs, err := strconv.Atoi(r.retryAfter); err != nil || secs < 1 {
			t.Errorf("Retry-After %q, want whole seconds >= 1", r.retryAfter)
		}
	}
	release.open()
	for range limit {
		if r := recv(t, results, "an admitted stream"); r.err != nil || r.status != http.StatusOK {
			t.Errorf("admitted stream: %d %v, want 200", r.status, r.err)
		}
	}
	// Every stream has been answered, so no more can reach the backend.
	if n := arrived.Load(); n != limit {
		t.Errorf("%d streams reached the backend, want %d", n, limit)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("client dialled %d connections, want 1 (the streams must share one)", n)
	}
}
