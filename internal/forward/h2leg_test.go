package forward

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// h2cBackend serves h over h2c with at most streams concurrent streams
// per connection, counting its connections.
func h2cBackend(t testing.TB, streams uint32, h http.HandlerFunc) (string, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: int(streams)}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(cl)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String(), cl
}

func testLeg(t *testing.T, addr string, maxConns int) *h2Leg {
	u := config.Default().Upstream
	u.MaxConnsPerBackend = maxConns
	u.ResponseHeaderTimeout = config.Duration(10 * time.Second)
	l := newH2Leg(addr, u, config.AppUpstream{Protocol: config.ProtocolH2C}, newFastDialer(u))
	t.Cleanup(l.closeIdle)
	return l
}

// get sends GET path on l and returns the status and body.
func (l *h2Leg) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("GET")
	req.Header.SetRequestURI(path)
	req.Header.SetHost("backend.test")
	if err := l.do(req, resp, legCall{}); err != nil {
		t.Error(err)
		return 0, ""
	}
	var body []byte
	if bs := resp.BodyStream(); bs != nil {
		body, _ = io.ReadAll(bs)
		releaseBody(resp, nil)
	}
	return resp.StatusCode(), string(body)
}

// Requests are streams on as few connections as the backend's stream
// limit allows, never more than max_conns_per_backend: 8 requests at once
// over connections of 4 streams take 2; a ninth waits for a stream rather
// than dial a third; sequential ones reuse what is open.
func TestH2LegMultiplexesOnFewConnections(t *testing.T) {
	release := make(chan struct{})
	var in atomic.Int64
	addr, ln := h2cBackend(t, 4, func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		if r.URL.Path == "/block" {
			<-release
		}
		io.WriteString(w, "ok "+r.Host+" "+r.URL.RequestURI())
	})
	l := testLeg(t, addr, 2)
	var wg sync.WaitGroup
	for range 9 {
		wg.Go(func() {
			if code, body := l.get(t, "/block"); code != 200 || body != "ok backend.test /block" {
				t.Errorf("got %d %q", code, body)
			}
		})
	}
	leaktest.WaitFor(t, 10*time.Second, "8 requests at the backend", func() bool { return in.Load() == 8 })
	if n := ln.n.Load(); n != 2 {
		t.Fatalf("%d connections for 8 streams of 4 a connection (at most 2); want 2", n)
	}
	close(release)
	wg.Wait()
	if in.Load() != 9 {
		t.Fatalf("%d requests reached the backend, want 9", in.Load())
	}
	for range 20 {
		if code, body := l.get(t, "/x?q=1"); code != 200 || body != "ok backend.test /x?q=1" {
			t.Fatalf("got %d %q", code, body)
		}
	}
	if n := ln.n.Load(); n != 2 {
		t.Fatalf("%d connections after sequential requests, want the 2 open ones reused", n)
	}
	if s := l.dialer.stats.Counts(); s.Dials != 2 || s.Exchanges != 29 || s.Open != 2 {
		t.Fatalf("stats %+v; want 2 dials, 29 exchanges, 2 open", s)
	}
}

// A connection the backend sends GOAWAY (here after a response with
// Connection: close) drains and takes no new request: the next dials
// again, within the budget, and succeeds.
func TestH2LegRedialsAfterGoAway(t *testing.T) {
	addr, ln := h2cBackend(t, 100, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bye" {
			w.Header().Set("Connection", "close") // net/http's HTTP/2 server: GOAWAY
		}
		io.WriteString(w, r.URL.Path)
	})
	l := testLeg(t, addr, 4)
	if code, body := l.get(t, "/bye"); code != 200 || body != "/bye" {
		t.Fatalf("got %d %q", code, body)
	}
	leaktest.WaitFor(t, 10*time.Second, "the GOAWAY to reach the leg's connection", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.conns) == 1 && !l.conns[0].cc.Usable()
	})
	for range 3 {
		if code, body := l.get(t, "/next"); code != 200 || body != "/next" {
			t.Fatalf("after GOAWAY: %d %q", code, body)
		}
	}
	if n := ln.n.Load(); n != 2 {
		t.Fatalf("%d connections; want 2 (one redial after the GOAWAY)", n)
	}
}

// h2TestOut is a request as copyHead leaves it: framing fields, a
// repeated field, names common and not.
func h2TestOut() *fasthttp.Request {
	out := &fasthttp.Request{}
	out.Header.DisableNormalizing()
	out.Header.SetMethod("POST")
	out.Header.SetRequestURI("/a/b?x=1&y")
	out.Header.SetHost("app.test")
	out.Header.Set("Content-Length", "3")
	out.Header.Set("Connection", "keep-alive")
	out.Header.Add("X-Forwarded-For", "192.0.2.1")
	out.Header.Add("X-Custom", "one")
	out.Header.Add("X-Custom", "two")
	out.Header.Add("Te", "trailers")
	return out
}

// TestH2RequestFields: the header block an HTTP/2 backend gets carries
// the method, target, Host and every field but the framing ones, names in
// lower case, values in order.
func TestH2RequestFields(t *testing.T) {
	l := &h2Leg{scheme: "http", addr: "127.0.0.1:1"}
	block, err := l.encode(nil, h2TestOut())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f.Name+": "+f.Value) })
	if _, err := dec.Write(block); err != nil {
		t.Fatal(err)
	}
	want := []string{":method: POST", ":scheme: http", ":authority: app.test", ":path: /a/b?x=1&y",
		"x-forwarded-for: 192.0.2.1", "x-custom: one", "x-custom: two", "te: trailers"}
	if !slices.Equal(got, want) {
		t.Fatalf("fields\n%q\nwant\n%q", got, want)
	}
	// A field HTTP/2 cannot carry as it is fails the request, not the backend.
	out := h2TestOut()
	out.Header.Add("X-Bad", "a\x00b")
	if _, err := l.encode(nil, out); err == nil {
		t.Fatal("a value with NUL encoded")
	}
	out = h2TestOut()
	out.Header.Set("Te", "gzip")
	block, _ = l.encode(nil, out)
	got = got[:0]
	dec.Write(block)
	if slices.Contains(got, "te: gzip") {
		t.Fatalf("te other than trailers went on: %q", got)
	}
}

// BenchmarkH2Request is the encoding of a request for an HTTP/2 backend.
func BenchmarkH2Request(b *testing.B) {
	l := &h2Leg{scheme: "http", addr: "127.0.0.1:1"}
	out := h2TestOut()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = l.encode(buf[:0], out)
	}
}

// BenchmarkH2LegGet is one GET through the HTTP/2 leg to an h2c backend
// (net/http's server, in this process: its allocations count too).
func BenchmarkH2LegGet(b *testing.B) {
	addr, _ := h2cBackend(b, 100, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	u := config.Default().Upstream
	l := newH2Leg(addr, u, config.AppUpstream{Protocol: config.ProtocolH2C}, newFastDialer(u))
	b.Cleanup(l.closeIdle)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("GET")
	req.Header.SetRequestURI("/")
	req.Header.SetHost("backend.test")
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.do(req, resp, legCall{}); err != nil {
			b.Fatal(err)
		}
		if bs := resp.BodyStream(); bs != nil {
			for {
				if _, err := bs.Read(buf); err != nil {
					break
				}
			}
			releaseBody(resp, nil)
		}
		resp.Reset()
	}
}
