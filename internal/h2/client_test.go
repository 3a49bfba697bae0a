package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawBackend is a backend that speaks HTTP/2 frame by frame as a test
// scripts it: the hostile peer a ClientConn must hold its own against.
type rawBackend struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder
}

// newRawPair returns a ClientConn and the backend at its other end, which
// has read the preface and the client's SETTINGS and sent its own
// (settings, after the defaults).
func newRawPair(t *testing.T, o ClientOptions, settings ...http2.Setting) (*ClientConn, *rawBackend) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *rawBackend, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		b := &rawBackend{t: t, c: c, fr: http2.NewFramer(c, c)}
		b.enc = hpack.NewEncoder(&b.buf)
		b.fr.ReadMetaHeaders = nil
		pre := make([]byte, len(clientPreface))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, pre); err != nil || string(pre) != clientPreface {
			c.Close()
			accepted <- nil
			return
		}
		if err := b.fr.WriteSettings(settings...); err != nil {
			c.Close()
			accepted <- nil
			return
		}
		c.SetDeadline(time.Time{})
		accepted <- b
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := NewClientConn(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("the backend did not start")
	}
	t.Cleanup(func() {
		cc.Close()
		b.c.Close()
	})
	return cc, b
}

// next reads the client's next frame, past SETTINGS (and its ACK),
// WINDOW_UPDATE and PING ACK frames unless one of those is wanted.
func (b *rawBackend) next(want ...http2.FrameType) http2.Frame {
	b.t.Helper()
	b.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := b.fr.ReadFrame()
		if err != nil {
			b.t.Fatalf("backend read: %v (want %v)", err, want)
		}
		typ := f.Header().Type
		for _, w := range want {
			if typ == w {
				return f
			}
		}
		switch typ {
		case http2.FrameSettings, http2.FrameWindowUpdate, http2.FramePing:
			continue
		}
		if len(want) == 0 {
			return f
		}
		b.t.Fatalf("backend got %v, want %v", f, want)
	}
}

// block encodes fields, given as name, value pairs.
func (b *rawBackend) block(kv ...string) []byte {
	b.buf.Reset()
	for i := 0; i < len(kv); i += 2 {
		b.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), b.buf.Bytes()...)
}

// headers writes a header block: HEADERS, and CONTINUATION frames for
// what passes the default frame size.
func (b *rawBackend) headers(id uint32, end bool, kv ...string) {
	b.t.Helper()
	block := b.block(kv...)
	n := min(len(block), maxFrameSize)
	err := b.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:n],
		EndStream: end, EndHeaders: n == len(block)})
	for block = block[n:]; err == nil && len(block) > 0; block = block[n:] {
		n = min(len(block), maxFrameSize)
		err = b.fr.WriteContinuation(id, n == len(block), block[:n])
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

func (b *rawBackend) data(id uint32, end bool, p []byte) {
	b.t.Helper()
	if err := b.fr.WriteData(id, end, p); err != nil {
		b.t.Fatal(err)
	}
}

// get starts a GET on cc.
func get(t *testing.T, cc *ClientConn, stop <-chan struct{}) *ClientStream {
	t.Helper()
	block := AppendRequestHead(nil, []byte("GET"), []byte("http"), []byte("backend.test"), []byte("/x"))
	st, _, err := cc.Start(block, nil, true, false, stop)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// requestOf reads the client's next HEADERS and returns its stream.
func (b *rawBackend) requestOf() uint32 {
	b.t.Helper()
	return b.next(http2.FrameHeaders).Header().StreamID
}

func TestClientRoundTrip(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	block := AppendRequestHead(nil, []byte("POST"), []byte("https"), []byte("backend.test"), []byte("/a?b"))
	block, _ = AppendRequestField(block, []byte("Content-Type"), []byte("text/plain"))
	block, _ = AppendRequestField(block, []byte("x-custom"), []byte("1"))
	st, sent, err := cc.Start(block, []byte("hello"), true, false, nil)
	if err != nil || sent != 5 {
		t.Fatalf("start: %v, %d sent", err, sent)
	}
	hf := b.next(http2.FrameHeaders).(*http2.HeadersFrame)
	var got []string
	hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f.Name+": "+f.Value) }).Write(hf.HeaderBlockFragment())
	want := ":method: POST|:scheme: https|:authority: backend.test|:path: /a?b|content-type: text/plain|x-custom: 1"
	if strings.Join(got, "|") != want || hf.StreamEnded() {
		t.Fatalf("request fields %q (ended %v), want %q", got, hf.StreamEnded(), want)
	}
	df := b.next(http2.FrameData).(*http2.DataFrame)
	if string(df.Data()) != "hello" || !df.StreamEnded() {
		t.Fatalf("request body %q ended %v", df.Data(), df.StreamEnded())
	}
	b.headers(1, false, ":status", "200", "content-type", "text/plain", "content-length", "11")
	b.data(1, false, []byte("hello "))
	b.data(1, false, []byte("world"))
	b.headers(1, true, "grpc-status", "0")
	status, fields, err := st.Head(time.Second)
	if err != nil || status != 200 || len(fields) != 3 || fields[0].Name != ":status" {
		t.Fatalf("head: %d %v %v", status, fields, err)
	}
	if st.ContentLength() != 11 {
		t.Fatalf("content-length %d", st.ContentLength())
	}
	body, err := io.ReadAll(st)
	if err != nil || string(body) != "hello world" {
		t.Fatalf("body %q %v", body, err)
	}
	if tr := st.Trailers(); len(tr) != 1 || tr[0].Name != "grpc-status" || tr[0].Value != "0" {
		t.Fatalf("trailers %v", tr)
	}
	st.Close()
	// A stream that ended both ways is not reset when closed.
	b.fr.WritePing(false, [8]byte{1})
	if f := b.next(http2.FramePing, http2.FrameRSTStream); f.Header().Type != http2.FramePing {
		t.Fatalf("after a whole exchange: %v", f)
	}
}

// TestClientMalformedResponse: a response HTTP/1.1 could not carry as
// it came, or that breaks HTTP/2's message rules, resets its stream
// (PROTOCOL_ERROR) and fails the request; the connection serves on.
func TestClientMalformedResponse(t *testing.T) {
	big := strings.Repeat("a", 70<<10)
	for _, tc := range []struct {
		name   string
		script func(b *rawBackend, id uint32)
		code   http2.ErrCode
	}{
		{"uppercase name", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "X-Up", "1") }, http2.ErrCodeProtocol},
		{"CR LF in a value", func(b *rawBackend, id uint32) {
			b.headers(id, true, ":status", "200", "x-a", "1\r\nset-cookie: stolen")
		}, http2.ErrCodeProtocol},
		{"NUL in a value", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "x-a", "1\x00") }, http2.ErrCodeProtocol},
		{"space in a name", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "x a", "1") }, http2.ErrCodeProtocol},
		{"connection field", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "connection", "close") }, http2.ErrCodeProtocol},
		{"transfer-encoding", func(b *rawBackend, id uint32) {
			b.headers(id, true, ":status", "200", "transfer-encoding", "chunked")
		}, http2.ErrCodeProtocol},
		{"te other than trailers", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "te", "gzip") }, http2.ErrCodeProtocol},
		{"no :status", func(b *rawBackend, id uint32) { b.headers(id, true, "x-a", "1") }, http2.ErrCodeProtocol},
		{"two :status", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", ":status", "204") }, http2.ErrCodeProtocol},
		{"a request pseudo-header", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", ":path", "/") }, http2.ErrCodeProtocol},
		{"pseudo after regular", func(b *rawBackend, id uint32) { b.headers(id, true, "x-a", "1", ":status", "200") }, http2.ErrCodeProtocol},
		{":status not 3 digits", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "2000") }, http2.ErrCodeProtocol},
		{":status not digits", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "2x0") }, http2.ErrCodeProtocol},
		{"101", func(b *rawBackend, id uint32) { b.headers(id, false, ":status", "101") }, http2.ErrCodeProtocol},
		{"content-length list", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200", "content-length", "1,2")
		}, http2.ErrCodeProtocol},
		{"content-lengths differ", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200", "content-length", "1", "content-length", "2")
		}, http2.ErrCodeProtocol},
		{"DATA beyond content-length", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200", "content-length", "2")
			b.data(id, false, []byte("abc"))
		}, http2.ErrCodeProtocol},
		{"END_STREAM short of content-length", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200", "content-length", "5")
			b.data(id, true, []byte("abc"))
		}, http2.ErrCodeProtocol},
		{"no body after content-length", func(b *rawBackend, id uint32) {
			b.headers(id, true, ":status", "200", "content-length", "5")
		}, http2.ErrCodeProtocol},
		{"DATA before the head", func(b *rawBackend, id uint32) { b.data(id, true, []byte("abc")) }, http2.ErrCodeProtocol},
		{"DATA in a 204", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "204")
			b.data(id, true, []byte("abc"))
		}, http2.ErrCodeProtocol},
		{"pseudo-header in trailers", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200")
			b.headers(id, true, ":status", "200")
		}, http2.ErrCodeProtocol},
		{"trailers without END_STREAM", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200")
			b.headers(id, false, "x-t", "1")
		}, http2.ErrCodeProtocol},
		{"header list too large", func(b *rawBackend, id uint32) { b.headers(id, true, ":status", "200", "x-big", big) }, http2.ErrCodeProtocol},
		{"too many 1xx", func(b *rawBackend, id uint32) {
			for range maxInformational + 1 {
				b.headers(id, false, ":status", "103")
			}
		}, http2.ErrCodeProtocol},
		{"stream window exceeded", func(b *rawBackend, id uint32) {
			b.headers(id, false, ":status", "200")
			chunk := make([]byte, 16<<10)
			for range clientStreamWindow / len(chunk) {
				b.data(id, false, chunk)
			}
			b.data(id, false, []byte("x"))
		}, http2.ErrCodeFlowControl},
		// §6.3 and §5.3.1 make these stream errors: the stream is reset,
		// the connection serves on.
		{"PRIORITY length", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FramePriority, 0, id, make([]byte, 4))
		}, http2.ErrCodeFrameSize},
		{"PRIORITY on itself", func(b *rawBackend, id uint32) {
			b.fr.WritePriority(id, http2.PriorityParam{StreamDep: id})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, b := newRawPair(t, ClientOptions{})
			st := get(t, cc, nil)
			id := b.requestOf()
			tc.script(b, id)
			rst := b.next(http2.FrameRSTStream).(*http2.RSTStreamFrame)
			if rst.StreamID != id || rst.ErrCode != tc.code {
				t.Fatalf("backend got RST_STREAM %v on %d, want %v on %d", rst.ErrCode, rst.StreamID, tc.code, id)
			}
			_, _, err := st.Head(time.Second)
			if err == nil {
				_, err = io.ReadAll(st)
			}
			var se *StreamError
			if !errors.As(err, &se) || se.Remote || ErrCode(se.Code) != ErrCode(tc.code) {
				t.Fatalf("owner got %v, want levee's stream error %v", err, tc.code)
			}
			st.Close()
			// The connection serves on.
			st2 := get(t, cc, nil)
			id2 := b.requestOf()
			b.headers(id2, true, ":status", "204")
			if status, _, err := st2.Head(time.Second); err != nil || status != 204 {
				t.Fatalf("next stream: %d %v", status, err)
			}
			st2.Close()
		})
	}
}

// TestClientProtocolError: a frame that breaks the protocol ends the
// connection with levee's GOAWAY, and fails its streams.
func TestClientProtocolError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(b *rawBackend, id uint32)
		code   http2.ErrCode
	}{
		{"PUSH_PROMISE", func(b *rawBackend, id uint32) {
			b.fr.WritePushPromise(http2.PushPromiseParam{StreamID: id, PromiseID: 2, BlockFragment: b.block(":method", "GET"), EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"HEADERS on a stream levee never opened", func(b *rawBackend, id uint32) { b.headers(id+2, true, ":status", "200") }, http2.ErrCodeProtocol},
		{"HEADERS on an even stream", func(b *rawBackend, id uint32) { b.headers(2, true, ":status", "200") }, http2.ErrCodeProtocol},
		{"RST_STREAM on an idle stream", func(b *rawBackend, id uint32) { b.fr.WriteRSTStream(id+2, http2.ErrCodeCancel) }, http2.ErrCodeProtocol},
		{"DATA on an idle stream", func(b *rawBackend, id uint32) { b.data(id+2, true, []byte("x")) }, http2.ErrCodeProtocol},
		{"frame too large", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameData, 0, id, make([]byte, maxFrameSize+1))
		}, http2.ErrCodeFrameSize},
		{"SETTINGS_ENABLE_PUSH 1", func(b *rawBackend, id uint32) {
			b.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 1})
		}, http2.ErrCodeProtocol},
		{"connection window overflow", func(b *rawBackend, id uint32) { b.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"SETTINGS on a stream", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameSettings, 0, id, nil)
		}, http2.ErrCodeProtocol},
		{"SETTINGS length", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameSettings, 0, 0, make([]byte, 5))
		}, http2.ErrCodeFrameSize},
		{"SETTINGS_MAX_FRAME_SIZE too small", func(b *rawBackend, id uint32) {
			b.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameSize - 1})
		}, http2.ErrCodeProtocol},
		{"WINDOW_UPDATE length", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, make([]byte, 3))
		}, http2.ErrCodeFrameSize},
		{"GOAWAY on a stream", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameGoAway, 0, id, make([]byte, 8))
		}, http2.ErrCodeProtocol},
		{"PRIORITY on stream 0", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FramePriority, 0, 0, make([]byte, 5))
		}, http2.ErrCodeProtocol},
		{"DATA padding as long as the frame", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FrameData, http2.FlagDataPadded, id, []byte{3, 0, 0})
		}, http2.ErrCodeProtocol},
		{"HEADERS padding past the priority fields", func(b *rawBackend, id uint32) {
			// 1 byte of block after the priority fields, 5 of padding:
			// §6.2 makes it a PROTOCOL_ERROR, not a short priority.
			b.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersPriority|http2.FlagHeadersEndHeaders,
				id, []byte{5, 0, 0, 0, 0, 16, 0x88})
		}, http2.ErrCodeProtocol},
		{"PING on a stream", func(b *rawBackend, id uint32) {
			b.fr.WriteRawFrame(http2.FramePing, 0, id, make([]byte, 8))
		}, http2.ErrCodeProtocol},
		{"CONTINUATION alone", func(b *rawBackend, id uint32) { b.fr.WriteContinuation(id, true, b.block(":status", "200")) }, http2.ErrCodeProtocol},
		{"a frame inside a header block", func(b *rawBackend, id uint32) {
			b.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.block(":status", "200")})
			b.fr.WritePing(false, [8]byte{})
		}, http2.ErrCodeProtocol},
		{"bad HPACK", func(b *rawBackend, id uint32) {
			b.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"PING flood", func(b *rawBackend, id uint32) {
			for range clientCalm + clientCalmPerStream + 1 {
				if b.fr.WritePing(false, [8]byte{}) != nil {
					return
				}
			}
		}, http2.ErrCodeEnhanceYourCalm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, b := newRawPair(t, ClientOptions{})
			st := get(t, cc, nil)
			id := b.requestOf()
			go tc.script(b, id)
			ga := b.next(http2.FrameGoAway).(*http2.GoAwayFrame)
			if ga.ErrCode != tc.code {
				t.Fatalf("GOAWAY %v, want %v", ga.ErrCode, tc.code)
			}
			_, _, err := st.Head(time.Second)
			var ce *ConnError
			if !errors.As(err, &ce) || ce.Remote || ErrCode(ce.Code) != ErrCode(tc.code) {
				t.Fatalf("owner got %v, want levee's connection error %v", err, tc.code)
			}
			st.Close()
			if cc.Usable() {
				t.Fatal("the connection takes streams after its protocol error")
			}
			select {
			case <-cc.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the reader did not end")
			}
		})
	}
}

// TestClientSlowStreamDoesNotStall: a stream whose owner reads nothing
// holds at most its window, and the others' data flows past it, far past
// the connection's window.
func TestClientSlowStreamDoesNotStall(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	slow := get(t, cc, nil)
	fast := get(t, cc, nil)
	sid, fid := b.requestOf(), b.requestOf()
	b.headers(sid, false, ":status", "200")
	b.headers(fid, false, ":status", "200")
	if _, _, err := slow.Head(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fast.Head(time.Second); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 16<<10)
	for range clientStreamWindow / len(chunk) {
		b.data(sid, false, chunk)
	}
	total := 2 * clientConnWindow
	done := make(chan error, 1)
	go func() {
		n, err := io.Copy(io.Discard, fast)
		if err == nil && n != int64(total) {
			err = errors.New("short body")
		}
		done <- err
	}()
	// The backend sends within the windows levee grants, as it must.
	connWin, stWin := clientConnWindow-clientStreamWindow, clientStreamWindow
	for sent := 0; sent < total; {
		for connWin == 0 || stWin == 0 {
			f := b.next(http2.FrameWindowUpdate).(*http2.WindowUpdateFrame)
			if f.StreamID == 0 {
				connWin += int(f.Increment)
			} else if f.StreamID == fid {
				stWin += int(f.Increment)
			}
		}
		n := min(len(chunk), connWin, stWin, total-sent)
		b.data(fid, sent+n == total, chunk[:n])
		sent, connWin, stWin = sent+n, connWin-n, stWin-n
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cc.mu.Lock()
	held := len(slow.buf) - slow.off
	cc.mu.Unlock()
	if held != clientStreamWindow {
		t.Fatalf("slow stream holds %d bytes, want its window %d", held, clientStreamWindow)
	}
	slow.Close()
	fast.Close()
}

// TestClientGoAway: streams past a GOAWAY's last stream were not taken
// (ErrUnprocessed, safe to send again); the others finish; the
// connection takes no new stream and closes when they are done.
func TestClientGoAway(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	first, second := get(t, cc, nil), get(t, cc, nil)
	id1, _ := b.requestOf(), b.requestOf()
	b.fr.WriteGoAway(id1, http2.ErrCodeNo, nil)
	if _, _, err := second.Head(time.Second); !errors.Is(err, ErrUnprocessed) {
		t.Fatalf("stream past the GOAWAY: %v, want ErrUnprocessed", err)
	}
	if cc.Usable() {
		t.Fatal("usable after GOAWAY")
	}
	if _, _, err := cc.Start(AppendRequestHead(nil, []byte("GET"), []byte("http"), []byte("h"), []byte("/")), nil, true, false, nil); !errors.Is(err, ErrUnprocessed) {
		t.Fatalf("a new stream after GOAWAY: %v", err)
	}
	b.headers(id1, true, ":status", "200")
	if status, _, err := first.Head(time.Second); err != nil || status != 200 {
		t.Fatalf("stream before the GOAWAY: %d %v", status, err)
	}
	second.Close()
	first.Close()
	b.next(http2.FrameGoAway)
	select {
	case <-cc.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not close once its streams were done")
	}
}

func TestClientRefusedStreamIsUnprocessed(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	st := get(t, cc, nil)
	b.fr.WriteRSTStream(b.requestOf(), http2.ErrCodeRefusedStream)
	_, _, err := st.Head(time.Second)
	var se *StreamError
	if !errors.Is(err, ErrUnprocessed) || !errors.As(err, &se) || !se.Remote {
		t.Fatalf("got %v, want the backend's REFUSED_STREAM as ErrUnprocessed", err)
	}
	st.Close()
	// Reset by the backend: levee does not reset it again.
	b.fr.WritePing(false, [8]byte{2})
	if f := b.next(http2.FramePing, http2.FrameRSTStream); f.Header().Type != http2.FramePing {
		t.Fatalf("got %v after the backend's reset", f)
	}
}

// TestClientBodyWithinWindows: a request body larger than the backend's
// windows waits for its WINDOW_UPDATEs and arrives whole, in order.
func TestClientBodyWithinWindows(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	b.next(http2.FrameSettings) // the client's ACK comes before any stream
	body := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	block := AppendRequestHead(nil, []byte("PUT"), []byte("http"), []byte("h"), []byte("/"))
	st, sent, err := cc.Start(block, body, true, false, nil)
	if err != nil || sent != 10 {
		t.Fatalf("start: %v, %d sent; want the window's 10", err, sent)
	}
	werr := make(chan error, 1)
	go func() { werr <- st.Write(body[sent:], true) }()
	var got []byte
	id := b.requestOf()
	for {
		f := b.next(http2.FrameData).(*http2.DataFrame)
		got = append(got, f.Data()...)
		if f.StreamEnded() {
			break
		}
		if len(f.Data()) > 0 {
			b.fr.WriteWindowUpdate(id, uint32(len(f.Data())))
		}
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("backend got %q, want %q", got, body)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	b.headers(id, true, ":status", "204")
	if _, _, err := st.Head(time.Second); err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// TestClientCloseResets: an owner that gives up resets the stream
// (CANCEL), so the backend stops, and its waits return.
func TestClientCloseResets(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	stop := make(chan struct{})
	st := get(t, cc, stop)
	id := b.requestOf()
	close(stop)
	if _, _, err := st.Head(0); err == nil {
		t.Fatal("a stopped wait for the head returned a head")
	}
	st.Close()
	rst := b.next(http2.FrameRSTStream).(*http2.RSTStreamFrame)
	if rst.StreamID != id || rst.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("got %v", rst)
	}
	// What the backend had in flight for it is dropped; the connection
	// serves on.
	b.headers(id, false, ":status", "200")
	b.data(id, true, []byte("late"))
	st2 := get(t, cc, nil)
	id2 := b.requestOf()
	b.headers(id2, true, ":status", "200")
	if _, _, err := st2.Head(time.Second); err != nil {
		t.Fatal(err)
	}
	st2.Close()
}

// TestClientIdleTimeout: a connection without a stream for IdleTimeout
// says GOAWAY and closes.
func TestClientIdleTimeout(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{IdleTimeout: 50 * time.Millisecond})
	st := get(t, cc, nil)
	b.headers(b.requestOf(), true, ":status", "204")
	if _, _, err := st.Head(time.Second); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if ga := b.next(http2.FrameGoAway).(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY %v", ga.ErrCode)
	}
	select {
	case <-cc.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection did not close")
	}
}

func TestClientHeadTimeout(t *testing.T) {
	cc, b := newRawPair(t, ClientOptions{})
	st := get(t, cc, nil)
	b.requestOf()
	_, _, err := st.Head(20 * time.Millisecond)
	var ne net.Error
	if err != ErrHeadTimeout || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want ErrHeadTimeout, a timeout", err)
	}
	st.Close()
}

func TestAppendRequestFieldRefuses(t *testing.T) {
	for _, kv := range [][2]string{{"x a", "1"}, {"", "1"}, {"x", "a\rb"}, {"x", "a\nb"}, {"x", "a\x00"}, {"x:y", "1"}} {
		if b, ok := AppendRequestField(nil, []byte(kv[0]), []byte(kv[1])); ok || len(b) != 0 {
			t.Errorf("%q: %q encoded", kv[0], kv[1])
		}
	}
	b, ok := AppendRequestField(nil, []byte("Authorization"), []byte("secret"))
	if !ok || b[0]&0xf0 != 0x10 {
		t.Fatalf("authorization not never-indexed: % x", b)
	}
}

// FuzzClientFrames: whatever bytes a backend sends after its SETTINGS,
// the client neither panics nor hangs, holds no stream's body past its
// window, and hands its owners only checked fields.
func FuzzClientFrames(f *testing.F) {
	frame := func(typ http2.FrameType, flags http2.Flags, id uint32, p []byte) []byte {
		var b bytes.Buffer
		http2.NewFramer(&b, nil).WriteRawFrame(typ, flags, id, p)
		return b.Bytes()
	}
	enc := func(kv ...string) []byte {
		var b bytes.Buffer
		e := hpack.NewEncoder(&b)
		for i := 0; i < len(kv); i += 2 {
			e.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return b.Bytes()
	}
	ok := append(frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 1, enc(":status", "200", "content-length", "2")),
		frame(http2.FrameData, http2.FlagDataEndStream, 1, []byte("hi"))...)
	f.Add(ok)
	f.Add(append(frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 3, enc(":status", "200")),
		frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 3, enc("grpc-status", "0"))...))
	f.Add(frame(http2.FrameGoAway, 0, 0, []byte{0, 0, 0, 1, 0, 0, 0, 0}))
	f.Add(frame(http2.FrameRSTStream, 0, 1, []byte{0, 0, 0, 7}))
	f.Add(frame(http2.FrameHeaders, 0, 1, enc(":status", "200")))
	f.Add(frame(http2.FrameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))
	f.Add(frame(http2.FrameSettings, 0, 0, []byte{0, 4, 0, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, in []byte) {
		cc, b := newRawPair(t, ClientOptions{})
		stop := make(chan struct{})
		s1, s2 := get(t, cc, stop), get(t, cc, stop)
		go func() {
			b.c.Write(in)
			io.Copy(io.Discard, b.c) // the client's frames, until it closes
		}()
		timer := time.AfterFunc(20*time.Millisecond, func() { close(stop) }) // the input is all in by then
		defer timer.Stop()
		for _, st := range []*ClientStream{s1, s2} {
			status, fields, err := st.Head(time.Second)
			if err == nil {
				if status < 200 || status > 999 {
					t.Fatalf("status %d handed on", status)
				}
				for _, fl := range fields {
					if fl.Name[0] != ':' && !validWireName(fl.Name) || strings.ContainsAny(fl.Value, "\r\n\x00") {
						t.Fatalf("field %q handed on", fl)
					}
				}
				io.Copy(io.Discard, st)
			}
			cc.mu.Lock()
			if held := len(st.buf) - st.off; held > clientStreamWindow {
				t.Fatalf("a stream holds %d bytes", held)
			}
			cc.mu.Unlock()
			st.Close()
		}
		closed := make(chan struct{})
		go func() {
			cc.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close hung")
		}
	})
}
