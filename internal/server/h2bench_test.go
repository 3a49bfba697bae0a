package server

// The cost of one proxied HTTP/2 request (issue 19, point 3), measured
// without the allocations of a real client or backend: h2rig's client
// writes its HEADERS from a kept HPACK encoder (after the first request
// every field is an index into the dynamic table, as browsers and h2load
// send them) and reads frames into one buffer; its backend answers each
// request with the same bytes. What allocates per request is levee.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2rig is a levee with an h2c listener in front of fixedBackend, and one
// client connection to it.
type h2rig struct {
	p    *proxy
	c    net.Conn
	br   *bufio.Reader
	henc *hpack.Encoder
	hbuf bytes.Buffer
	out  []byte
	in   []byte
	head [9]byte
	id   uint32
	// fields are the request's, after the pseudo-fields.
	fields []hpack.HeaderField
	// body, if set, makes the request a POST of it, with its length.
	body []byte
}

// rawBody is the backend's answer's body, and a POST's.
var rawBody, rawBodyLen = strings.Repeat("x", 100), "100"

// newH2Rig starts levee with limits (YAML under the app, "" none) and
// connects to it.
func newH2Rig(tb testing.TB, limits string) *h2rig {
	tb.Helper()
	be := fixedBackend(tb, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+rawBodyLen+"\r\n\r\n"+rawBody)
	cfg := fmt.Sprintf("listen: [{addr: 127.0.0.1:0, h2c: true}]\napps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be)
	if limits != "" {
		cfg += "    " + limits + "\n"
	}
	p := startProxy(tb, cfg)
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	r := &h2rig{p: p, c: c, br: bufio.NewReaderSize(c, 64<<10), id: 1, in: make([]byte, 64<<10),
		fields: []hpack.HeaderField{{Name: "user-agent", Value: "h2load nghttp2/1.64.0"}, {Name: "accept", Value: "*/*"}}}
	r.henc = hpack.NewEncoder(&r.hbuf)
	b := []byte(http2.ClientPreface)
	b = appendFrame(b, http2.FrameSettings, 0, 0, nil)
	b = appendFrame(b, http2.FrameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, 1<<30))
	if _, err := c.Write(b); err != nil {
		tb.Fatal(err)
	}
	return r
}

func appendFrame(b []byte, t http2.FrameType, flags http2.Flags, id uint32, p []byte) []byte {
	b = append(b, byte(len(p)>>16), byte(len(p)>>8), byte(len(p)), byte(t), byte(flags))
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, p...)
}

// get sends GET / for a.test (or POST r.body) and reads its response to
// the stream's end: the status's HPACK byte (0x88 is 200 indexed, as
// levee sends it; 0 for another) and the body's length.
func (r *h2rig) get(tb testing.TB) (status byte, n int) {
	r.hbuf.Reset()
	method, end := "GET", http2.FlagHeadersEndStream
	if r.body != nil {
		method, end = "POST", 0
	}
	for _, f := range [...]hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "a.test"}, {Name: ":path", Value: "/"}} {
		r.henc.WriteField(f)
	}
	for _, f := range r.fields {
		r.henc.WriteField(f)
	}
	if r.body != nil {
		r.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: rawBodyLen})
	}
	id := r.id
	r.id += 2
	r.out = appendFrame(r.out[:0], http2.FrameHeaders, http2.FlagHeadersEndHeaders|end, id, r.hbuf.Bytes())
	if r.body != nil {
		r.out = appendFrame(r.out, http2.FrameData, http2.FlagDataEndStream, id, r.body)
	}
	if _, err := r.c.Write(r.out); err != nil {
		tb.Fatal(err)
	}
	for {
		h := r.head[:]
		if _, err := io.ReadFull(r.br, h); err != nil {
			tb.Fatal(err)
		}
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags, sid := http2.FrameType(h[3]), http2.Flags(h[4]), binary.BigEndian.Uint32(h[5:])&(1<<31-1)
		p := r.in[:length]
		if _, err := io.ReadFull(r.br, p); err != nil {
			tb.Fatal(err)
		}
		switch {
		case typ == http2.FrameSettings && flags&http2.FlagSettingsAck == 0:
			r.out = appendFrame(r.out[:0], http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
			r.c.Write(r.out)
		case typ == http2.FrameRSTStream && sid == id, typ == http2.FrameGoAway:
			tb.Fatalf("stream %d: frame %v", id, typ)
		case sid != id:
		case typ == http2.FrameHeaders:
			if len(p) > 0 && p[0] == 0x88 {
				status = 0x88
			}
		case typ == http2.FrameData:
			n += length
		}
		if sid == id && flags&http2.FlagDataEndStream != 0 && (typ == http2.FrameData || typ == http2.FrameHeaders) {
			return status, n
		}
	}
}

// fixedBackend answers every request on a connection with answer, read up
// to its blank line and past a body of rawBody's length if it says it has
// one; it returns its address.
func fixedBackend(tb testing.TB, answer string) string {
	out, body := []byte(answer), make([]byte, len(rawBody))
	cl := []byte("content-length: " + rawBodyLen + "\r\n")
	return scriptBackend(tb, func(c net.Conn, br *bufio.Reader) {
		withBody := false // the first request's head is read already: a GET
		for {
			if withBody {
				if _, err := io.ReadFull(br, body); err != nil {
					return
				}
			}
			if _, err := c.Write(out); err != nil {
				return
			}
			withBody = false
			for { // the next request's head
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
					break
				}
				withBody = withBody || bytes.EqualFold(line, cl)
			}
		}
	})
}

// BenchmarkProxyH2 is one proxied h2c request, with levee's allocations
// alone (h2rig): a GET served, a POST served, and a GET refused (rate).
func BenchmarkProxyH2(b *testing.B) {
	for _, post := range []bool{false, true} {
		name := "served"
		if post {
			name = "post"
		}
		b.Run(name, func(b *testing.B) {
			r := newH2Rig(b, "")
			if post {
				r.body = []byte(rawBody)
			}
			r.get(b)
			b.ReportAllocs()
			for b.Loop() {
				if st, n := r.get(b); st != 0x88 || n != len(rawBody) {
					b.Fatalf("status %#x, %d bytes", st, n)
				}
			}
		})
	}
	b.Run("refused", func(b *testing.B) {
		r := newH2Rig(b, "limits: {rate: 1/m, burst: 1}")
		r.get(b) // spends the burst
		b.ReportAllocs()
		for b.Loop() {
			if st, n := r.get(b); st == 0x88 || n == 0 {
				b.Fatalf("status %#x, %d bytes: not refused", st, n)
			}
		}
	})
}

// BenchmarkProxyH1 is BenchmarkProxyH2/served on HTTP/1.1 (the fasthttp
// engine), for comparison: a kept connection, GET / and its response
// read whole into one buffer, in front of the same backend.
func BenchmarkProxyH1(b *testing.B) {
	get := proxyH1Getter(b)
	b.ReportAllocs()
	for b.Loop() {
		get()
	}
}

// proxyH1Getter starts a backend with a fixed answer and levee before it,
// and returns a GET / over one kept HTTP/1.1 connection to levee that
// reads the answer whole.
func proxyH1Getter(tb testing.TB) func() {
	be := fixedBackend(tb, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+rawBodyLen+"\r\n\r\n"+rawBody)
	p := startProxy(tb, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n", be))
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: a.test\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	body := make([]byte, len(rawBody))
	get := func() {
		if _, err := c.Write(req); err != nil {
			tb.Fatal(err)
		}
		status, err := br.ReadSlice('\n')
		if err != nil || !bytes.HasPrefix(status, []byte("HTTP/1.1 200")) {
			tb.Fatalf("%q %v", status, err)
		}
		for { // the head; the body is rawBody's length
			line, err := br.ReadSlice('\n')
			if err != nil {
				tb.Fatal(err)
			}
			if len(line) <= 2 {
				break
			}
		}
		if _, err := io.ReadFull(br, body); err != nil {
			tb.Fatal(err)
		}
	}
	get()
	return get
}
