package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/h1loop"
)

// answerBackend answers the first request on a connection plainly (so that
// the connection goes back to levee's pool) and every other with answer
// (the bytes for a GET; head for a HEAD), written in parts split at "|"
// with a pause between them; it closes after an answer with
// "Connection: close".
func answerBackend(t *testing.T, answer, head string) string {
	t.Helper()
	return serveBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			method, _, err := readNaiveRequest(br)
			if err != nil {
				return
			}
			a := answer
			switch {
			case n == 0 && method == "HEAD":
				a = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
			case n == 0:
				a = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
			case method == "HEAD":
				a = head
			}
			for i, part := range strings.Split(a, "|") {
				if i > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				if _, err := c.Write([]byte(part)); err != nil {
					return
				}
			}
			if strings.Contains(a, "Connection: close") {
				return
			}
		}
	})
}

// The event loop forwards a simple request and writes the backend's answer
// itself, byte for byte as fasthttp writes it; an answer it does not
// write itself (chunked, long, interim, refused) goes to a worker, which
// answers as fasthttp does. The plain cases are the loop's: no worker is
// handed the requests that find an idle connection.
func TestLoopForwardAnswersAsFasthttp(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	long := strings.Repeat("x", 20000)
	cases := []struct {
		name, answer, head string
		loop               string // the methods the loop answers (after the first request, which dials)
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nhello",
			"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-A: 1\r\n\r\n", "GET HEAD"},
		{"hop-by-hop", "HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nServer: be\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\n", "GET HEAD"},
		{"split", "HTTP/1.1 200 OK\r\nContent-|Length: 6\r\n\r\nab|cdef", "HTTP/1.1 200 OK\r\n|Content-Length: 6\r\n\r\n", "GET HEAD"},
		{"empty", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "GET HEAD"},
		{"204", "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", "GET HEAD"},
		{"304", "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", "GET HEAD"},
		{"backend-close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n", ""},
		{"http10", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			"", ""}, // (a HEAD's answer without a length: the test's client would wait for a close)
		{"long", "HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n" + long, "HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n", "HEAD"},
		{"interim", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "HEAD"},
		{"bad-head", "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\nX-A: 1\n\r\n", ""},
		{"after-end", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ""},
		{"bodiless-body", "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 304 Not Modified\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", ""},
		{"unasked-switch", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", ""},
	}
	for _, tc := range cases {
		for _, method := range []string{"GET", "HEAD"} {
			if method == "HEAD" && tc.head == "" {
				continue
			}
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				be := answerBackend(t, tc.answer, tc.head)
				req := []byte(method + " /p?q=1 HTTP/1.1\r\nHost: a.test\r\nUser-Agent: t\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n")
				var answers [2][]byte
				var conns [2]string         // what became of the backend connections
				var submitted atomic.Uint64 // requests the event loop handed to a worker
				var handed uint64
				for i, loop := range []string{"true", "false"} {
					cfg := mustParse(t, "server: {event_loop: "+loop+"}\napps:\n  a:\n    hosts: [a.test]\n    backends: ["+be+"]\n")
					p := startProxyHooks(t, cfg, Options{}, nil, func(s *Server) {
						if e := s.listeners[0].loop; e != nil {
							e.workers.onSubmit = func() { submitted.Add(1) }
						}
					})
					answers[i] = exchangeRaw(t, p, req, 4)
					if i == 0 {
						handed = submitted.Load()
					}
					conns[i] = fmt.Sprint("dials ", p.metricSum("levee_backend_dials_total", nil))
					for _, r := range forward.UncleanReasons {
						conns[i] += fmt.Sprintf(" %s %v", r, p.metric("levee_backend_conns_unclean_total", map[string]string{"reason": r}))
					}
				}
				got, want := dateLine.ReplaceAll(answers[0], nil), dateLine.ReplaceAll(answers[1], nil)
				if !bytes.Equal(got, want) {
					t.Fatalf("event loop answered\n%q\nfasthttp\n%q", got, want)
				}
				if conns[0] != conns[1] {
					t.Fatalf("backend connections: event loop %s, fasthttp %s", conns[0], conns[1])
				}
				loop := strings.Contains(tc.loop, method)
				if loop && handed != 1 {
					t.Fatalf("%d requests went to a worker, want only the first (which dials)", handed)
				}
				if !loop && handed < 2 {
					t.Fatalf("the loop answered what the forward core must: %q", got)
				}
			})
		}
	}
}

// A request the loop forwards gets the forwarding fields levee sets, and
// none of the client's hop-by-hop or forged ones: the head the backend
// reads is the one the fasthttp engine sends.
func TestLoopForwardSendsTheSameHead(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	var heads [2][]string
	for i, loop := range []string{"true", "false"} {
		got := make(chan string, 8)
		be := scriptBackendAll(t, func(head string) string {
			got <- head
			return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
		})
		p := startProxy(t, "server: {event_loop: "+loop+"}\napps:\n  a:\n    hosts: [a.test]\n    backends: ["+be+"]\n")
		req := []byte("GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\nTE: trailers\r\nX-Forwarded-For: 6.6.6.6\r\n" +
			"Forwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nProxy: evil\r\nLevee-Shadow: x\r\nAccept: */*\r\n\r\n")
		exchangeRaw(t, p, req, 2)
		for range 2 {
			heads[i] = append(heads[i], <-got)
		}
	}
	// The time left differs by the milliseconds between the runs.
	left := regexp.MustCompile(`Levee-Deadline: \d+`)
	if a, b := left.ReplaceAllString(fmt.Sprint(heads[0]), ""), left.ReplaceAllString(fmt.Sprint(heads[1]), ""); a != b {
		t.Fatalf("the loop sent\n%q\nfasthttp sent\n%q", heads[0], heads[1])
	}
	for _, bad := range []string{"6.6.6.6", "evil", "Levee-Shadow", "keep-alive"} {
		if strings.Contains(heads[0][1], bad) {
			t.Fatalf("forwarded head has %q: %q", bad, heads[0][1])
		}
	}
}

// scriptBackendAll answers each request with answer(its head as read),
// and closes the connection unanswered where that is "".
func scriptBackendAll(t *testing.T, answer func(head string) string) string {
	t.Helper()
	return serveBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			a := answer(head.String())
			if a == "" {
				return // closed unanswered
			}
			if _, err := c.Write([]byte(a)); err != nil {
				return
			}
		}
	})
}

// A TLS listener's HTTP/1.1 connections are the event loops' too: the
// loop holds the connection, forwards its simple requests (the backend
// learns they came over TLS), hands a request with a body to fasthttp
// over the same session, and gives an HTTP/2 connection to levee's
// HTTP/2 server after the handshake.
func TestLoopServesTLS(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop here")
	}
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s xfp=%s fwd=%s body=%s", r.Method, r.URL.Path,
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Forwarded"), b)
	})
	cert, key, roots := selfSigned(t)
	p := startProxy(t, fmt.Sprintf("listen: [{addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}]\n"+
		"server: {event_loop: true}\napps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", cert, key, be))
	l := p.srv.listeners[0]
	if l.loop == nil {
		t.Fatal("the TLS listener has no event loop")
	}
	url := "https://" + p.srv.Addrs()[0].String()
	do := func(c *http.Client, method, path, body string) (string, int) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Host = "a.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readAll(t, resp), resp.ProtoMajor
	}
	tlsConf := &tls.Config{RootCAs: roots, ServerName: "photos.test"} // selfSigned's name
	h1 := newClient(t, &http.Transport{TLSClientConfig: tlsConf.Clone(), Protocols: http1Only()})
	const fwd = "for=127.0.0.1;host=a.test;proto=https"
	for i := range 4 { // the first dials; the others find its connection idle, in the loop
		path := fmt.Sprintf("/get%d", i)
		if got, _ := do(h1, "GET", path, ""); got != "GET "+path+" xfp=https fwd="+fwd+" body=" {
			t.Fatalf("GET %s: %q", path, got)
		}
		if n := l.loop.srv.Open(); n != 1 {
			t.Fatalf("the loops hold %d connections, want the client's 1", n)
		}
	}
	// A body: handed to fasthttp with the session.
	if got, _ := do(h1, "POST", "/post", "hello"); got != "POST /post xfp=https fwd="+fwd+" body=hello" {
		t.Fatalf("POST: %q", got)
	}
	if got, _ := do(h1, "GET", "/after", ""); got != "GET /after xfp=https fwd="+fwd+" body=" {
		t.Fatalf("GET after the POST: %q", got)
	}
	h2c := newClient(t, &http.Transport{TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: true})
	if got, proto := do(h2c, "GET", "/h2", ""); proto != 2 || got != "GET /h2 xfp=https fwd="+fwd+" body=" {
		t.Fatalf("HTTP/2: HTTP/%d %q", proto, got)
	}
}
