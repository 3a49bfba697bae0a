package server

// End-to-end tests of the backend connection reuse rule (docs/http.md,
// "Backend connections"): a connection goes back to the pool only after a
// clean exchange, so no request ever reads bytes meant for another, however
// a backend misframes its answers. Each test would hand some request the
// answer to a request smuggled past levee if the rule broke.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// smuggled is the path of the request hidden in a client's body, and of
// the answer a misframing backend sends unasked: no client may read it.
const smuggled = "/smuggled"

// fakeAnswer is a whole response to the smuggled request: read as the
// answer to the next request on the connection, it would pass for one.
const fakeAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n" + smuggled

// naiveBackend is a raw HTTP/1.1 backend of the kind that makes response
// queue poisoning possible. It parses requests by their header alone,
// ignoring Content-Length and chunking (so a request smuggled in a body is
// answered as a request of its own), and answers each with its path as
// the body, framed by answer (which may add bytes after the response's
// end; late bytes come in a write of their own after late). It counts the
// smuggled requests it answered, and the late writes it has made.
type naiveBackend struct {
	addr     string
	answered atomic.Int64 // smuggled requests answered
	lateSent atomic.Int64 // late bytes written
}

// answerFunc writes the answer to a request for method and path on w, and
// the bytes to send after it, late or at once.
type answerFunc func(method, path string) (answer, after string)

func startNaiveBackend(t *testing.T, answer answerFunc, late time.Duration) *naiveBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &naiveBackend{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b.serve(c, answer, late)
			}()
		}
	}()
	return b
}

func (b *naiveBackend) serve(c net.Conn, answer answerFunc, late time.Duration) {
	br := bufio.NewReader(c)
	// Answers go out when the input read so far is used up, as servers
	// answer pipelined requests: an answer to a smuggled request, and
	// bytes sent at once, leave in the same write as the answer before.
	bw := bufio.NewWriter(c)
	for {
		method, path, err := readNaiveRequest(br)
		if err != nil {
			return
		}
		if path == smuggled {
			b.answered.Add(1)
		}
		resp, after := answer(method, path)
		bw.WriteString(resp)
		if late > 0 && after != "" {
			if bw.Flush() != nil {
				return
			}
			time.Sleep(late)
		}
		bw.WriteString(after)
		if br.Buffered() == 0 && bw.Flush() != nil {
			return
		}
		if late > 0 && after != "" {
			b.lateSent.Add(1)
		}
	}
}

// readNaiveRequest skips lines until one looks like a request line, then
// reads the header through its empty line; the body is left unread.
func readNaiveRequest(br *bufio.Reader) (method, path string, err error) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		f := strings.Fields(line)
		if len(f) == 3 && strings.HasPrefix(f[2], "HTTP/1.") && strings.HasPrefix(f[1], "/") {
			method, path = f[0], f[1]
			break
		}
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		if strings.TrimRight(line, "\r\n") == "" {
			return method, path, nil
		}
	}
}

// lengthAnswer is a plain answer: the path, with its length.
func lengthAnswer(path string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(path), path)
}

func chunkedAnswer(path string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(path), path)
}

// earlyAnswer answers at once, by the header alone, as a redirect or a
// handler that ignores the body does: the body is read as a request.
func earlyAnswer(_, path string) (string, string) { return lengthAnswer(path), "" }

// smugglingRequest is one form of a client request whose body holds a
// whole second request (smuggled).
type smugglingRequest struct {
	name string
	make func(url, host, path string) *http.Request
}

var smugglingForms = []smugglingRequest{
	{"POST with a length", func(url, host, path string) *http.Request {
		return hiddenRequest(http.MethodPost, url+path, host, int64(len(hiddenBody)), "")
	}},
	{"GET with a length", func(url, host, path string) *http.Request {
		return hiddenRequest(http.MethodGet, url+path, host, int64(len(hiddenBody)), "")
	}},
	{"chunked", func(url, host, path string) *http.Request {
		return hiddenRequest(http.MethodPost, url+path, host, -1, "")
	}},
	{"Expect: 100-continue", func(url, host, path string) *http.Request {
		return hiddenRequest(http.MethodPost, url+path, host, int64(len(hiddenBody)), "100-continue")
	}},
}

const hiddenBody = "GET " + smuggled + " HTTP/1.1\r\nHost: photos.test\r\n\r\n"

func hiddenRequest(method, url, host string, n int64, expect string) *http.Request {
	req, err := http.NewRequest(method, url, io.NopCloser(strings.NewReader(hiddenBody)))
	if err != nil {
		panic(err)
	}
	req.Host, req.ContentLength = host, n
	if expect != "" {
		req.Header.Set("Expect", expect)
	}
	return req
}

// checkOwnAnswer fails t unless resp answers path: its body is path itself
// (a 200), or it is levee's own 502. The smuggled answer fails it.
func checkOwnAnswer(t *testing.T, what, path string, resp *http.Response, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s %s: %v", what, path, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		t.Errorf("%s %s: reading the body: %v", what, path, err)
	case string(body) == smuggled:
		t.Errorf("%s %s: got the answer to the request smuggled in another's body", what, path)
	case resp.StatusCode == http.StatusOK && string(body) != path:
		t.Errorf("%s %s: got %q, another request's answer", what, path, body)
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadGateway:
		t.Errorf("%s %s: status %d", what, path, resp.StatusCode)
	}
}

// A backend that answers before it reads the request body, then reads the
// body as a request of its own, answers that one too on the same
// connection. Over many rounds of each form, the request after the
// smuggling one (on the connection levee would reuse) gets its own answer.
func TestEarlyAnswerNeverReachesTheNextRequest(t *testing.T) {
	for _, form := range smugglingForms {
		t.Run(form.name, func(t *testing.T) {
			b := startNaiveBackend(t, earlyAnswer, 0)
			p := startProxy(t, photosApp(b.addr, "", ""))
			client := newClient(t, http.DefaultTransport.(*http.Transport).Clone())
			for round := range 20 {
				path := fmt.Sprintf("/attack-%d", round)
				resp, err := client.Do(form.make(p.URL, "photos.test", path))
				checkOwnAnswer(t, form.name, path, resp, err)
				for i := range 3 {
					getOwnAnswer(t, client, p, fmt.Sprintf("/victim-%d-%d", round, i))
				}
			}
			if b.answered.Load() == 0 {
				t.Fatal("the backend never answered a smuggled request: the test proves nothing")
			}
			{
				if n := p.metric("levee_backend_conns_unclean_total", map[string]string{"reason": "after-end"}) +
					p.metric("levee_backend_conns_unclean_total", map[string]string{"reason": "unsolicited"}); n == 0 {
					t.Error("no unclean backend connection counted")
				}
			}
		})
	}
}

// getOwnAnswer sends a plain GET of path to the app through client and
// checks its answer (checkOwnAnswer).
func getOwnAnswer(t *testing.T, client *http.Client, p *proxy, path string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
	req.Host = "photos.test"
	resp, err := client.Do(req)
	checkOwnAnswer(t, "GET", path, resp, err)
}

// Backends that send bytes after a response's end: a body on a HEAD, 204
// or 304 answer, or a whole second answer after a complete one. Whether
// the bytes come with the answer or late (once the connection is idle in
// levee's pool), the next request gets its own answer.
func TestBytesAfterTheEndNeverReachTheNextRequest(t *testing.T) {
	forms := []struct {
		name   string
		method string
		answer answerFunc
	}{
		{"HEAD with a body", http.MethodHead, func(_, path string) (string, string) {
			return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(fakeAnswer)), fakeAnswer
		}},
		{"204 with a body", http.MethodGet, func(_, path string) (string, string) {
			return "HTTP/1.1 204 No Content\r\n\r\n", fakeAnswer
		}},
		{"304 with a body", http.MethodGet, func(_, path string) (string, string) {
			return "HTTP/1.1 304 Not Modified\r\n\r\n", fakeAnswer
		}},
		{"after a length", http.MethodGet, func(_, path string) (string, string) {
			return lengthAnswer(path), fakeAnswer
		}},
		{"after chunks", http.MethodGet, func(_, path string) (string, string) {
			return chunkedAnswer(path), fakeAnswer
		}},
		{"a 101 unasked", http.MethodGet, func(_, path string) (string, string) {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", fakeAnswer
		}},
	}
	for _, form := range forms {
		for _, late := range []time.Duration{0, 5 * time.Millisecond} {
			name := form.name
			if late > 0 {
				name += ", late"
			}
			t.Run(name, func(t *testing.T) {
				// Only the /bad- requests are misanswered.
				answer := func(method, path string) (string, string) {
					if strings.HasPrefix(path, "/bad-") {
						return form.answer(method, path)
					}
					return lengthAnswer(path), ""
				}
				b := startNaiveBackend(t, answer, late)
				p := startProxy(t, photosApp(b.addr, "", ""))
				client := newClient(t, http.DefaultTransport.(*http.Transport).Clone())
				for round := range 10 {
					req, _ := http.NewRequest(form.method, fmt.Sprintf("%s/bad-%d", p.URL, round), nil)
					req.Host = "photos.test"
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if late > 0 {
						// The late bytes on the idle connection: written on
						// loopback, they are in levee's socket once written.
						waitFor(t, "the late bytes written", func() bool { return b.lateSent.Load() == int64(round+1) })
					}
					for i := range 3 {
						getOwnAnswer(t, client, p, fmt.Sprintf("/next-%d-%d", round, i))
					}
				}
				if form.name != "a 101 unasked" {
					var n float64
					for _, r := range []string{"after-end", "bodiless-body", "unsolicited"} {
						n += p.metric("levee_backend_conns_unclean_total", map[string]string{"reason": r})
					}
					if n == 0 {
						t.Error("no unclean backend connection counted")
					}
				}
			})
		}
	}
}

// 64 clients share the backend pool at once, some smuggling requests in
// their bodies (every form), some sending bodiless requests for 204s with
// a body behind them, the rest plain GETs: every plain GET gets its own
// answer, every time.
func TestNoAnswerReachesAnotherClientUnderConcurrency(t *testing.T) {
	answer := func(method, path string) (string, string) {
		switch {
		case strings.HasPrefix(path, "/nocontent"):
			return "HTTP/1.1 204 No Content\r\n\r\n", fakeAnswer
		case strings.HasPrefix(path, "/extra"):
			return lengthAnswer(path), fakeAnswer
		}
		return lengthAnswer(path), ""
	}
	b := startNaiveBackend(t, answer, 0)
	p := startProxy(t, photosApp(b.addr, "", ""))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	client := newClient(t, tr)
	const clients, each = 64, 40
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				path := fmt.Sprintf("/c%d-%d", c, i)
				var req *http.Request
				switch c % 4 {
				case 0:
					req = smugglingForms[i%len(smugglingForms)].make(p.URL, "photos.test", path)
				case 1:
					prefix := "/nocontent"
					if i%2 == 1 {
						prefix = "/extra"
					}
					req, _ = http.NewRequest(http.MethodGet, p.URL+prefix+path, nil)
					req.Host = "photos.test"
					resp, err := client.Do(req)
					if err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if string(body) == smuggled {
							wrong.Add(1)
							t.Errorf("%s%s: got the smuggled answer", prefix, path)
						}
					}
					continue
				default:
					req, _ = http.NewRequest(http.MethodGet, p.URL+path, nil)
					req.Host = "photos.test"
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("%s: %v", path, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) == smuggled || resp.StatusCode == http.StatusOK && string(body) != path {
					wrong.Add(1)
					t.Errorf("%s: got %q, another request's answer", path, body)
				}
			}
		}()
	}
	wg.Wait()
	if b.answered.Load() == 0 {
		t.Fatal("the backend never answered a smuggled request: the test proves nothing")
	}
	t.Logf("%d smuggled requests answered by the backend; %d answers went astray", b.answered.Load(), wrong.Load())
}
