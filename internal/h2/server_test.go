package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// guard bounds every wait of these tests; none measures time.
const guard = 10 * time.Second

// serve starts s on a loopback listener and returns its address; the
// listener and every connection end with the test.
func serve(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.ServeConn(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// h2cClient is net/http's client, speaking prior-knowledge h2c.
func h2cClient(t testing.TB) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: guard}
}

// rawClient writes frames by hand and reads the server's.
type rawClient struct {
	t    testing.TB
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dialRaw(t testing.TB, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, guard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return handshake(t, c, settings...)
}

func handshake(t testing.TB, c net.Conn, settings ...http2.Setting) *rawClient {
	t.Helper()
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.SetDeadline(time.Now().Add(guard))
	io.WriteString(c, http2.ClientPreface)
	rc.fr.WriteSettings(settings...)
	for {
		f := rc.read()
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			rc.fr.WriteSettingsAck()
			return rc
		}
	}
}

func (rc *rawClient) read() http2.Frame {
	rc.t.Helper()
	f, err := rc.fr.ReadFrame()
	if err != nil {
		rc.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// get writes a GET of path on stream id.
func (rc *rawClient) get(id uint32, path string, end bool) {
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "test"}, {":path", path}} {
		rc.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(),
		EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// response reads until stream id ends and returns its status and body,
// acknowledging SETTINGS on the way; other streams' frames go to other.
func (rc *rawClient) response(id uint32, other func(http2.Frame)) (string, []byte) {
	rc.t.Helper()
	var status string
	var body []byte
	for {
		f := rc.read()
		if f.Header().StreamID != id {
			if other != nil {
				other(f)
			}
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if status == "" {
				status = f.PseudoValue("status")
			}
			if f.StreamEnded() {
				return status, body
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return status, body
			}
		case *http2.RSTStreamFrame:
			rc.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
		}
	}
}

func TestGet(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Proto != "HTTP/2.0" || r.Host != "test" || r.RequestURI != "/x?y=1" || r.URL.Path != "/x" || r.ContentLength != 0 {
			t.Errorf("request %s %s %q %q %d", r.Proto, r.Host, r.RequestURI, r.URL.Path, r.ContentLength)
		}
		w.Header().Set("X-A", "b")
		io.WriteString(w, "hello")
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/x?y=1", true)
	status, body := rc.response(1, nil)
	if status != "200" || string(body) != "hello" {
		t.Fatalf("got %s %q", status, body)
	}
}

// writeCounter records what each Write of the server's connection holds.
type writeCounter struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// framesOf parses the frames of one write.
func framesOf(p []byte) []frameHeader {
	var out []frameHeader
	for len(p) >= frameHeaderLen {
		fh := parseFrameHeader(p)
		out = append(out, fh)
		p = p[min(len(p), frameHeaderLen+int(fh.length)):]
	}
	return out
}

// TestResponseIsOneWrite: a small response whose handler returns with
// its body buffered leaves in one write: HEADERS, then DATA with
// END_STREAM.
func TestResponseIsOneWrite(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wc *writeCounter
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wc = &writeCounter{Conn: c}
		s.ServeConn(wc)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc := handshake(t, client)
	for id := uint32(1); id <= 5; id += 2 {
		rc.get(id, "/", true)
		if _, body := rc.response(id, nil); string(body) != "hello" {
			t.Fatalf("body %q", body)
		}
	}
	client.Close()
	<-done
	wc.mu.Lock()
	defer wc.mu.Unlock()
	for id := uint32(1); id <= 5; id += 2 {
		var in []int
		for i, w := range wc.writes {
			for _, fh := range framesOf(w) {
				if fh.stream == id {
					in = append(in, i)
					break
				}
			}
		}
		if len(in) != 1 {
			t.Fatalf("stream %d's frames went out in %d writes, want 1", id, len(in))
		}
		fhs := framesOf(wc.writes[in[0]])
		var kinds []string
		for _, fh := range fhs {
			if fh.stream == id {
				kinds = append(kinds, http2.FrameType(fh.typ).String()+map[bool]string{true: "+END_STREAM"}[fh.flags&flagEndStream != 0 && (fh.typ == frameData || fh.typ == frameHeaders)])
			}
		}
		if strings.Join(kinds, " ") != "HEADERS DATA+END_STREAM" {
			t.Errorf("stream %d's write held %v, want HEADERS and DATA with END_STREAM", id, kinds)
		}
	}
}

// TestFlowControl: the server sends no more than the client's windows.
func TestFlowControl(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	rc.get(1, "/", true)
	var got []byte
	for len(got) < 10 {
		if d, ok := rc.read().(*http2.DataFrame); ok {
			got = append(got, d.Data()...)
		}
	}
	if len(got) != 10 {
		t.Fatalf("%d bytes within a window of 10", len(got))
	}
	// Nothing more until the window opens: a PING's answer comes first.
	rc.fr.WritePing(false, [8]byte{1})
	for {
		f := rc.read()
		if _, ok := f.(*http2.DataFrame); ok {
			t.Fatal("DATA beyond the window")
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break
		}
	}
	rc.fr.WriteWindowUpdate(1, 90)
	_, rest := rc.response(1, nil)
	if !bytes.Equal(append(got, rest...), body) {
		t.Fatalf("body %q", append(got, rest...))
	}
}

// TestSlowStreamDoesNotStarveOthers: a stream whose window is closed
// waits alone; the connection's other streams are served.
func TestSlowStreamDoesNotStarveOthers(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 64<<10)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(big)
			return
		}
		io.WriteString(w, "small")
	})})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.get(1, "/big", true)
	for i := uint32(0); i < 10; i++ {
		id := 3 + 2*i
		rc.get(id, "/small", true)
		rc.fr.WriteWindowUpdate(id, 100)
		if _, body := rc.response(id, nil); string(body) != "small" {
			t.Fatalf("stream %d: %q", id, body)
		}
	}
	rc.fr.WriteWindowUpdate(1, uint32(len(big)))
	rc.fr.WriteWindowUpdate(0, uint32(len(big))) // the small ones took some of it
	if _, body := rc.response(1, nil); len(body) != len(big) {
		t.Fatalf("the big body: %d bytes", len(body))
	}
}

func TestTrailers(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || string(b) != "up" || r.Trailer.Get("Up-Sum") != "u1" {
			t.Errorf("request body %q, %v, trailer %v", b, err, r.Trailer)
		}
		w.Header().Set("Trailer", "Down-Sum")
		io.WriteString(w, "down")
		w.(http.Flusher).Flush()
		w.Header().Set("Down-Sum", "d1")
		w.Header().Set(http.TrailerPrefix+"Late", "l1")
	})})
	req, _ := http.NewRequest("POST", "http://"+addr+"/", nil)
	req.Trailer = http.Header{"Up-Sum": nil}
	req.ContentLength = -1
	req.Body = &trailerBody{r: strings.NewReader("up"), req: req}
	resp, err := h2cClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "down" || resp.Trailer.Get("Down-Sum") != "d1" || resp.Trailer.Get("Late") != "l1" {
		t.Fatalf("response %q, trailer %v", b, resp.Trailer)
	}
}

// trailerBody sets the request's trailer once read to its end.
type trailerBody struct {
	r   io.Reader
	req *http.Request
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.req.Trailer.Set("Up-Sum", "u1")
	}
	return n, err
}

func (b *trailerBody) Close() error { return nil }

// TestResetCancelsContext: RST_STREAM from the client cancels the
// request's context and fails its body's reads.
func TestResetCancelsContext(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan error, 1)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
		case <-time.After(guard):
		}
		_, err := r.Body.Read(make([]byte, 1))
		if r.Context().Err() == nil {
			err = errors.New("context not cancelled")
		} else if err == nil {
			err = errors.New("body read after the reset succeeded")
		} else {
			err = nil
		}
		cancelled <- err
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/", false)
	<-started
	rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case err := <-cancelled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(guard):
		t.Fatal("the handler's context was not cancelled")
	}
}

// TestShutdown: GOAWAY at once, the stream in flight finishes, then the
// connection closes and Shutdown returns.
func TestShutdown(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "late")
	})}
	addr := serve(t, s)
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for {
		if g, ok := rc.read().(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last %d", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a stream in flight", err)
	default:
	}
	// A stream past the GOAWAY is never taken.
	rc.get(3, "/", true)
	close(release)
	status, body := rc.response(1, func(f http2.Frame) {
		if f.Header().StreamID == 3 {
			t.Errorf("stream 3, past the GOAWAY, got %v", f)
		}
	})
	if status != "200" || string(body) != "late" {
		t.Fatalf("got %s %q", status, body)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(guard):
		t.Fatal("Shutdown did not return")
	}
	if _, err := rc.fr.ReadFrame(); err == nil {
		t.Fatal("the connection is still open")
	}
}

// TestShutdownContext: Shutdown gives up when its context ends; Close
// then ends the stream, cancelling its context.
func TestShutdownContext(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(ended)
	})}
	addr := serve(t, s)
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline", err)
	}
	s.Close()
	select {
	case <-ended:
	case <-time.After(guard):
		t.Fatal("the handler's context was not cancelled by Close")
	}
}

// TestPanicResetsStream: http.ErrAbortHandler resets the stream with
// INTERNAL_ERROR; the connection goes on.
func TestPanicResetsStream(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/abort", true)
	for {
		if r, ok := rc.read().(*http2.RSTStreamFrame); ok {
			if r.StreamID != 1 || r.ErrCode != http2.ErrCodeInternal {
				t.Fatalf("RST_STREAM %d %v", r.StreamID, r.ErrCode)
			}
			break
		}
	}
	rc.get(3, "/", true)
	if _, body := rc.response(3, nil); string(body) != "ok" {
		t.Fatalf("after the panic: %q", body)
	}
}

// TestRefuseStream: a handler that refuses its stream before the head
// resets it with REFUSED_STREAM (its client may send it again); once the
// head is written it cannot, and the response goes on. The connection
// serves on.
func TestRefuseStream(t *testing.T) {
	refused := make(chan bool, 2)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs := w.(interface{ RefuseStream() bool })
		if r.URL.Path == "/late" {
			io.WriteString(w, "ok")
			w.(http.Flusher).Flush()
		}
		refused <- rs.RefuseStream()
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	for {
		if r, ok := rc.read().(*http2.RSTStreamFrame); ok {
			if r.StreamID != 1 || r.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("RST_STREAM %d %v; want 1 REFUSED_STREAM", r.StreamID, r.ErrCode)
			}
			break
		}
	}
	if !<-refused {
		t.Fatal("RefuseStream before the head reported false")
	}
	rc.get(3, "/late", true)
	if _, body := rc.response(3, nil); string(body) != "ok" {
		t.Fatalf("a stream refused after its head: %q, want its response", body)
	}
	if <-refused {
		t.Fatal("RefuseStream after the head reported true")
	}
}

// TestRequestBodyFlowControl: a body larger than the windows streams
// through as the handler reads it, and the connection window comes back.
func TestRequestBodyFlowControl(t *testing.T) {
	const size = 5 << 20
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || n != size {
			t.Errorf("read %d, %v", n, err)
		}
		io.WriteString(w, "done")
	})})
	client := h2cClient(t)
	for range 2 {
		resp, err := client.Post("http://"+addr+"/", "application/octet-stream", io.LimitReader(zeros{}, size))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Fatalf("%q", b)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestContentLengthMismatch: more DATA than the content-length is a
// stream error; less fails the handler's read.
func TestContentLengthMismatch(t *testing.T) {
	var readErr atomic.Value
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			if r.ContentLength == 10 { // the short body's (the long one's may come later)
				readErr.Store(err.Error())
			}
			w.WriteHeader(400)
		}
	})})
	rc := dialRaw(t, addr)
	post := func(id uint32, cl string) {
		rc.hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "test"}, {":path", "/"}, {"content-length", cl}} {
			rc.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndHeaders: true})
	}
	post(1, "3")
	rc.fr.WriteData(1, true, []byte("toolong"))
	for {
		if r, ok := rc.read().(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
			if r.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("RST_STREAM %v", r.ErrCode)
			}
			break
		}
	}
	post(3, "10")
	rc.fr.WriteData(3, true, []byte("short"))
	if status, _ := rc.response(3, nil); status != "400" {
		t.Fatalf("short body: %s", status)
	}
	if s, _ := readErr.Load().(string); !strings.Contains(s, "Content-Length") {
		t.Fatalf("read error %q", s)
	}
}

func TestExpectContinue(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			t.Errorf("Expect passed to the handler")
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})})
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "test"}, {":path", "/"}, {"expect", "100-continue"}} {
		rc.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes(), EndHeaders: true})
	for {
		if h, ok := rc.read().(*http2.MetaHeadersFrame); ok {
			if h.PseudoValue("status") != "100" {
				t.Fatalf("status %s before the body, want 100", h.PseudoValue("status"))
			}
			break
		}
	}
	rc.fr.WriteData(1, true, []byte("body"))
	if status, body := rc.response(1, nil); status != "200" || string(body) != "body" {
		t.Fatalf("%s %q", status, body)
	}
}

// BenchmarkRequest is one GET and its small response on a connection
// kept open, over loopback.
func BenchmarkRequest(b *testing.B) {
	payload := []byte("hello, world\n")
	addr := serve(b, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(payload)
	})})
	rc := dialRaw(b, addr)
	rc.c.SetDeadline(time.Time{})
	rc.fr.WriteWindowUpdate(0, 1<<31-1-65535) // the client reads every body
	b.ReportAllocs()
	id := uint32(1)
	for b.Loop() {
		rc.get(id, "/", true)
		if _, body := rc.response(id, nil); len(body) != len(payload) {
			b.Fatal("short body")
		}
		id += 2
	}
}

// TestConnectionClose: a handler's Connection: close sends GOAWAY before
// its response, so that the client opens no stream the server would
// refuse, and the connection closes after the response.
func TestConnectionClose(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	var goaway bool
	status, body := rc.response(1, func(f http2.Frame) {
		if g, ok := f.(*http2.GoAwayFrame); ok && g.LastStreamID == 1 && g.ErrCode == http2.ErrCodeNo {
			goaway = true
		}
	})
	if !goaway || status != "200" || string(body) != "bye" {
		t.Fatalf("GOAWAY before the response %v; response %s %q", goaway, status, body)
	}
	if f, err := rc.fr.ReadFrame(); err == nil {
		t.Fatalf("after the response: %v, want the connection closed", f)
	}
}

// BenchmarkRequestNetHTTP is BenchmarkRequest against net/http's HTTP/2
// server (golang.org/x/net/http2), for comparison.
func BenchmarkRequestNetHTTP(b *testing.B) {
	payload := []byte("hello, world\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(payload)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	srv := &http2.Server{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
		}
	}()
	rc := dialRaw(b, ln.Addr().String())
	rc.c.SetDeadline(time.Time{})
	rc.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	b.ReportAllocs()
	id := uint32(1)
	for b.Loop() {
		rc.get(id, "/", true)
		if _, body := rc.response(id, nil); len(body) != len(payload) {
			b.Fatal("short body")
		}
		id += 2
	}
}

// TestGoAwayNeverRaisesLastStream: after a graceful GOAWAY, a stream the
// client opens anyway is never taken, and a later connection error's
// GOAWAY names no stream past the first's (RFC 9113 §6.8: the last
// stream id must not increase). Found by FuzzH2Frames.
func TestGoAwayNeverRaisesLastStream(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	defer close(release)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	<-started
	rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil) // the client goes away: the server answers with its own
	var first *http2.GoAwayFrame
	for first == nil {
		first, _ = rc.read().(*http2.GoAwayFrame)
	}
	if first.LastStreamID != 1 {
		t.Fatalf("the graceful GOAWAY names stream %d, want 1", first.LastStreamID)
	}
	rc.get(3, "/", true) // past the GOAWAY: never taken
	rc.get(4, "/", true) // an even stream id: a connection error
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatal("the connection closed without a second GOAWAY:", err)
		}
		if f.Header().StreamID == 3 {
			t.Fatalf("stream 3, past the GOAWAY, got %v", f)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol || g.LastStreamID > first.LastStreamID {
				t.Fatalf("second GOAWAY %v names stream %d after one of %d", g.ErrCode, g.LastStreamID, first.LastStreamID)
			}
			return
		}
	}
}

// TestWriterLeftToFlushFlushes: a writer that waited for the write lock
// is the one left to flush what its holder wrote (unlockWrite skips the
// flush when another waits). One whose stream was reset meanwhile, so it
// writes nothing, must still flush: else the frames wait in the buffer
// while the reader blocks on the client, which waits for them (a PING's
// ack: FuzzH2Frames found the hang, a window overflow resetting a stream
// whose handler waited for the lock).
func TestWriterLeftToFlushFlushes(t *testing.T) {
	for _, name := range []string{"flushOut", "sendHeadersOnly"} {
		t.Run(name, func(t *testing.T) {
			server, client := net.Pipe()
			defer client.Close()
			c := newConn(&Server{}, server)
			defer c.nc.Close()
			c.wbuf = c.wbuf[:0]
			st := &stream{c: c, id: 1, reset: true, resetErr: errStreamClosed}
			c.lockWrite() // the reader, writing a PING's ack
			c.wbuf = appendFrameHeader(c.wbuf, 8, framePing, flagAck, 0)
			c.wbuf = append(c.wbuf, "12345678"...)
			done := make(chan error, 1)
			go func() {
				if name == "flushOut" {
					done <- st.flushOut(nil, true)
				} else {
					done <- st.sendHeadersOnly()
				}
			}()
			for c.waiting.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			c.unlockWrite(time.Time{}) // leaves the flush to the waiting writer
			client.SetReadDeadline(time.Now().Add(guard))
			got := make([]byte, frameHeaderLen+8)
			if _, err := io.ReadFull(client, got); err != nil {
				t.Fatalf("the PING's ack never left the buffer: %v", err)
			}
			if err := <-done; err == nil {
				t.Fatal("a write on a reset stream succeeded")
			}
		})
	}
}

// TestSettingsAckBeforeTheDataItLetsThrough: a SETTINGS that opens the
// streams' windows is acknowledged ahead of the DATA it lets through, so
// that a peer waiting for the ACK (h2spec 6.9.2/1) does not meet the DATA
// first. Many streams wait at once, so that, were the writers woken before
// the ACK is written, one of them would win the race for the write lock.
func TestSettingsAckBeforeTheDataItLetsThrough(t *testing.T) {
	const streams, rounds = 40, 5
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), rounds))
	})})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for i := range streams {
		rc.get(uint32(2*i+1), "/", true)
	}
	// Each handler sends its HEADERS before it waits for a window.
	for seen := 0; seen < streams; {
		switch f := rc.read().(type) {
		case *http2.MetaHeadersFrame:
			seen++
		case *http2.DataFrame:
			t.Fatalf("DATA on stream %d within a window of 0", f.StreamID)
		}
	}
	for r := 1; r <= rounds; r++ {
		rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(r)})
		for acked, data := false, 0; data < streams; {
			switch f := rc.read().(type) {
			case *http2.SettingsFrame:
				acked = acked || f.IsAck()
			case *http2.DataFrame:
				if !acked {
					t.Fatalf("round %d: DATA on stream %d ahead of the SETTINGS ACK", r, f.StreamID)
				}
				data++
			}
		}
	}
}
