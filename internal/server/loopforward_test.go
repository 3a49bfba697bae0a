package server

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strings"
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
				var conns [2]string // what became of the backend connections
				var handed uint64
				for i, loop := range []string{"true", "false"} {
					p := startProxy(t, "server: {event_loop: "+loop+"}\napps:\n  a:\n    hosts: [a.test]\n    backends: ["+be+"]\n")
					answers[i] = exchangeRaw(t, p, req, 4)
					if i == 0 {
						handed = p.srv.listeners[0].loop.workers.submitted.Load()
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
