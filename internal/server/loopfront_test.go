package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/testlog"
)

// loopVariants are the ways a simple request may ask for its answer: each
// changes the answer's framing (a connection header, a HEAD's body).
var loopVariants = []struct {
	name string
	edit func(h *fasthttp.RequestHeader)
}{
	{"GET", func(*fasthttp.RequestHeader) {}},
	{"HEAD", func(h *fasthttp.RequestHeader) { h.SetMethod("HEAD") }},
	{"close", func(h *fasthttp.RequestHeader) { h.SetConnectionClose() }},
	{"HTTP/1.0", func(h *fasthttp.RequestHeader) { h.SetProtocol("HTTP/1.0") }},
	{"HTTP/1.0 keep-alive", func(h *fasthttp.RequestHeader) {
		h.SetProtocol("HTTP/1.0")
		h.Set("Connection", "keep-alive")
	}},
}

// dateLine is the one line of an answer that may differ between two
// servers answering at once.
var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

// TestLoopAnswersAsFasthttp sends every refusal of refusalCases, in every
// variant, to a proxy on the event loops and to one on fasthttp, both on
// one stopped clock, and wants the same bytes back: the loop answers what
// it refuses itself (front) exactly as fasthttp's server answers the same
// refusal, and what it hands on is the same request.
func TestLoopAnswersAsFasthttp(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	for _, rc := range refusalCases {
		if rc.reason == "client-share" || rc.reason == "backend-client-share" {
			continue // held for 10.0.0.1, the fake peer of refusalServer: here the client queues
		}
		for _, v := range loopVariants {
			t.Run(rc.reason+"/"+v.name, func(t *testing.T) {
				var answers [2][]byte
				for i, loop := range []string{"true", "false"} {
					cfg := "server: {event_loop: " + loop + "}\napps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n"
					if rc.limits != "" {
						cfg += "    " + rc.limits + "\n"
					}
					p := startProxyClock(t, cfg, clock.NewFake(time.Unix(1e9, 0)))
					if rc.hold != nil {
						rc.hold(t, p.srv.view("a"))
					}
					var h fasthttp.RequestHeader
					h.SetHost("a.test")
					h.SetRequestURI("/")
					if rc.req != nil {
						rc.req(&h)
					}
					v.edit(&h)
					req := append(h.Header(), bytes.Repeat([]byte("x"), max(h.ContentLength(), 0))...)
					// Twice on one connection (a rate's first passes), then
					// once on a fresh one, as the connection allows.
					answers[i] = exchangeRaw(t, p, req, 2)
					answers[i] = append(answers[i], exchangeRaw(t, p, req, 1)...)
				}
				got, want := dateLine.ReplaceAll(answers[0], nil), dateLine.ReplaceAll(answers[1], nil)
				if !bytes.Equal(got, want) {
					t.Fatalf("event loop answered\n%q\nfasthttp\n%q", got, want)
				}
			})
		}
	}
}

// exchangeRaw writes req n times on one connection, each after the
// answer to the one before, and returns every byte that came back, until
// the proxy closed.
func exchangeRaw(t *testing.T, p *proxy, req []byte, n int) []byte {
	t.Helper()
	c, err := net.Dial("tcp", p.srv.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	for range n {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var resp fasthttp.Response
		resp.SkipBody = bytes.HasPrefix(req, []byte("HEAD "))
		if err := resp.Read(br); err != nil {
			t.Fatalf("reading answer: %v (read %q)", err, got.Bytes())
		}
		if resp.ConnectionClose() {
			if _, err := io.ReadAll(br); err != nil && !closedErr(err) {
				t.Fatalf("after a close: %v", err)
			}
			break
		}
	}
	return got.Bytes()
}

// TestLoopRefusesWithoutAWorker: a refusal of route or check is answered
// in the loop; no goroutine serves it.
func TestLoopRefusesWithoutAWorker(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	p := startProxy(t, `server: {event_loop: true}
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:9]
    limits: {url_length: 10, rate: 1/m, burst: 1}
`)
	c, err := net.Dial("tcp", p.srv.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func(req string, status int) {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != status {
			t.Fatalf("%q: status %d, want %d", req, resp.StatusCode(), status)
		}
	}
	for range 20 {
		ask("GET / HTTP/1.1\r\nHost: nobody.test\r\n\r\n", 404)
		ask("GET /a-long-path HTTP/1.1\r\nHost: a.test\r\n\r\n", 414)
	}
	e := p.srv.listeners[0].loop
	if n := e.workers.spawned.Load(); n != 0 {
		t.Fatalf("%d workers served refusals", n)
	}
	ask("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 502) // passes: a worker forwards it
	for range 20 {
		ask("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 429)
	}
	if n := e.workers.spawned.Load(); n != 1 {
		t.Fatalf("%d workers, want the one that forwarded", n)
	}
	if got := p.metric("levee_requests_total", map[string]string{"app": "a", "code": "429"}); got != 20 {
		t.Errorf("429s counted: %v, want 20", got)
	}
}

// TestLoopLogsWhatItRefuses: with the access log into the bounded log
// queue (levee serve's), the loop still answers its refusals itself, and
// each has its line. With a handler of the caller's, whose write may
// block, they go to a worker.
func TestLoopLogsWhatItRefuses(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	const cfg = `server: {event_loop: true}
log: {access: true}
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:9]
    limits: {url_length: 10}
`
	reqs := []string{"GET /a-long-path HTTP/1.1\r\nHost: a.test\r\n\r\n", "GET /x HTTP/1.1\r\nHost: nobody.test\r\n\r\n"}
	for _, queued := range []bool{true, false} {
		var lines testlog.Buffer
		out := observe.NewLogWriter(&lines, observe.DefaultLogWriterLimits)
		out.Start()
		o := Options{LogOutput: out}
		if !queued {
			o.AccessLog = slog.NewJSONHandler(&lines, nil)
		}
		p := startProxyOptions(t, cfg, o)
		for range 5 {
			for _, req := range reqs {
				exchangeRaw(t, p, []byte(req), 1)
			}
		}
		p.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := out.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		workers := p.srv.listeners[0].loop.workers.spawned.Load()
		if queued && workers != 0 || !queued && workers == 0 {
			t.Errorf("queued %v: %d workers", queued, workers)
		}
		log := lines.String()
		for _, want := range []string{
			`"msg":"access","app":"a","method":"GET","host":"a.test","path":"/a-long-path","status":414,`,
			`"reject":"url-length"`,
		} {
			if n := strings.Count(log, want); n != 5 {
				t.Errorf("queued %v: %d lines with %s, want 5:\n%s", queued, n, want, log)
			}
		}
	}
}

// TestLoopTracesWhatItRefuses: with tracing on, the loop still answers
// its refusals itself, and each has its span, as fasthttp's would.
func TestLoopTracesWhatItRefuses(t *testing.T) {
	if !testLoop() {
		t.Skip("the event loops' run")
	}
	p, rc, _ := tracedProxy(t, "sample_ratio: 1, refusals_per_second: 100", "    limits: {url_length: 4}\n")
	for range 5 {
		if code := tracedGet(t, p, "Traceparent", clientTP).StatusCode; code != http.StatusRequestURITooLong {
			t.Fatalf("status %d, want 414", code)
		}
	}
	if n := p.srv.listeners[0].loop.workers.spawned.Load(); n != 0 {
		t.Fatalf("%d workers served traced refusals", n)
	}
	p.Stop()
	spans := rc.got(t)
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	for _, sp := range spans {
		a := attrs(sp)
		for k, v := range map[string]string{"http.request.method": "GET", "url.path": "/pics/1", "url.scheme": "http",
			"server.address": "photos.test", "server.port": "8080", "network.protocol.version": "1.1",
			"client.address": "127.0.0.1", "user_agent.original": "tracetest/1", "http.response.status_code": "414",
			"levee.app": "photos", "levee.reject": "url-length"} {
			if a[k] != v {
				t.Errorf("%s = %q, want %q (all: %v)", k, a[k], v, a)
			}
		}
		if hex.EncodeToString(sp.TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(sp.ParentSpanId) != "00f067aa0ba902b7" {
			t.Errorf("span %x parent %x: not the client's trace", sp.TraceId, sp.ParentSpanId)
		}
		if got := strings.Join(eventNames(sp), ","); got != "shape" {
			t.Errorf("events %s, want shape", got)
		}
	}
}

// TestLoopHeadReadsAsFasthttp: what check and account read of a request
// the loop parsed (loopHead) is what they read of the same request on
// fasthttp (fastExchange).
func TestLoopHeadReadsAsFasthttp(t *testing.T) {
	heads := []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET /p/q?x=1&y=2 HTTP/1.1\r\nHost: a.test:8080\r\nUser-Agent: u1\r\nX-Key: k1\r\nx-key: k2\r\n\r\n",
		"HEAD /h HTTP/1.0\r\nHost: a\r\nCookie: a=1\r\nCookie: b=2\r\nUser-Agent: u1\r\nUser-Agent: u2\r\n\r\n",
		"DELETE /d HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nContent-Length: 0\r\nx-KEY: v\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Type: a\r\nContent-Type: b\r\nConnection: close\r\n\r\n",
	}
	keys := []clientkey.Source{clientkey.New("ip"), clientkey.New("header:X-Key"), clientkey.New("header:user-agent"),
		clientkey.New("header:Host"), clientkey.New("header:Absent")}
	nc := netlimit.Wrap(fakeConn{})
	sock := &loopSocket{nc: nc, remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}}
	for _, raw := range heads {
		var h h1loop.Head
		if r := h1loop.ParseHead([]byte(raw), 8<<10, &h); r != h1loop.Simple {
			t.Fatalf("%q: %v", raw, r)
		}
		x := &loopHead{h: &h, sock: sock}
		ctx := new(fasthttp.RequestCtx)
		ctx.Init2(nc, nil, false)
		ctx.Request.Header.DisableNormalizing()
		if err := ctx.Request.Header.Read(bufio.NewReader(bytes.NewReader([]byte(raw)))); err != nil {
			t.Fatal(err)
		}
		f := &fastExchange{c: ctx}
		xc, xs := x.Headers()
		fc, fs := f.Headers()
		for _, c := range []struct {
			what      string
			got, want any
		}{
			{"path", x.Path(), string(ctx.Path())}, // what fastExchange routes on
			{"target", x.Target(), f.Target()},
			{"host", x.host(), f.host()},
			{"header count", xc, fc},
			{"header bytes", xs, fs},
			{"content length", x.ContentLength(), f.ContentLength()},
			{"method", x.method(), f.method()},
		} {
			if c.got != c.want {
				t.Errorf("%q: %s: loop %v, fasthttp %v", raw, c.what, c.got, c.want)
			}
		}
		for _, k := range keys {
			if got, want := x.ClientKey(k), f.ClientKey(k); got != want {
				t.Errorf("%q: client key %v: loop %q, fasthttp %q", raw, k, got, want)
			}
			if got, want := x.TopKey(k), f.TopKey(k); got != want {
				t.Errorf("%q: top key %v: loop %q, fasthttp %q", raw, k, got, want)
			}
		}
	}
}

// TestLoopAdmitsInTheLoop: the loop begins each admission itself. A queue
// that is full refuses there; a place in the queue is the worker's to
// wait in, and gets the slot released to it; a client that leaves while it
// waits gives its place back; nothing is left held.
func TestLoopAdmitsInTheLoop(t *testing.T) {
	if !h1loop.Supported {
		t.Skip("no event loop on this system")
	}
	skipOnH2C(t, "raw HTTP/1.1 bytes")
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p := startProxy(t, `server: {event_loop: true}
apps:
  a:
    hosts: [a.test]
    backends: [`+be+`]
    limits: {concurrency: 1, queue: {max_len: 1, max_wait: 30s}}
`)
	lim := p.srv.view("a").Limiter
	mustAcquire(t, lim, admit.Ticket{}) // the one slot, held
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.srv.Addrs()[0].String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	status := func(br *bufio.Reader) int {
		t.Helper()
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode()
	}
	_, queued := dial()
	waitFor(t, "a request queued", func() bool { return lim.Queued() == 1 })
	for range 10 {
		_, br := dial()
		if got := status(br); got != http.StatusServiceUnavailable {
			t.Fatalf("a full queue answered %d", got)
		}
	}
	e := p.srv.listeners[0].loop
	if n := e.workers.spawned.Load(); n != 1 {
		t.Fatalf("%d workers, want the queued request's alone", n)
	}
	lim.Release()
	if got := status(queued); got != http.StatusOK {
		t.Fatalf("the queued request: %d", got)
	}
	waitFor(t, "its slot released", func() bool { return lim.InFlight() == 0 })

	mustAcquire(t, lim, admit.Ticket{})
	c, _ := dial()
	waitFor(t, "a request queued", func() bool { return lim.Queued() == 1 })
	c.Close()
	waitFor(t, "the place of a client gone given back", func() bool { return lim.Queued() == 0 })
	lim.Release()
	if lim.InFlight() != 0 {
		t.Fatalf("%d slots held", lim.InFlight())
	}
	if got := p.metric("levee_requests_total", map[string]string{"app": "a", "code": "503"}); got != 10 {
		t.Errorf("503s counted: %v, want 10", got)
	}
}

// BenchmarkLoopRefusal is a refusal answered in the event loop, over a
// loopback connection: the client's write and read included, and every
// allocation in the process counted (the loop's path allocates none).
func BenchmarkLoopRefusal(b *testing.B) {
	if !h1loop.Supported {
		b.Skip("no event loop on this system")
	}
	for _, bc := range []struct{ name, limits, host string }{
		{"no-route", "", "nobody.test"},
		{"rate", "limits: {rate: 1/m, burst: 1}", "a.test"},
		{"queue-full", "limits: {concurrency: 1, queue: {max_len: 0}}", "a.test"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := "server: {event_loop: true}\napps:\n  a:\n    hosts: [a.test]\n    backends: [127.0.0.1:9]\n"
			if bc.limits != "" {
				cfg += "    " + bc.limits + "\n"
			}
			p := startProxy(b, cfg)
			if bc.name == "queue-full" {
				mustAcquire(b, p.srv.view("a").Limiter, admit.Ticket{})
			}
			c, err := net.Dial("tcp", p.srv.Addrs()[0].String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET / HTTP/1.1\r\nHost: " + bc.host + "\r\n\r\n")
			br := bufio.NewReader(c)
			var resp fasthttp.Response
			ask := func() int {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if err := resp.Read(br); err != nil {
					b.Fatal(err)
				}
				return resp.StatusCode()
			}
			ask() // a rate's first passes
			if code := ask(); code < 400 || code == http.StatusBadGateway {
				b.Fatalf("status %d: not refused", code)
			}
			b.ReportAllocs()
			for b.Loop() {
				ask()
			}
		})
	}
}
