package server

// The HTTP/2 side of one framing, or none: requests written frame by frame
// (golang.org/x/net/http2's Framer and hpack) to an h2c listener, forwarded
// by levee as HTTP/1.1 to the recording backend of framing_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/reply"
)

// h2TestConn is a prior-knowledge h2c client connection that writes whatever
// fields it is given: hpack encodes any name and value, and nothing
// validates them on this side.
type h2TestConn struct {
	c    net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	buf  bytes.Buffer
	next uint32 // the next stream id
	dead bool   // GOAWAY or a broken connection: dial again
}

func dialH2Framing(addr string) (*h2TestConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &h2TestConn{c: c, next: 1}
	h.fr = http2.NewFramer(c, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}

func (h *h2TestConn) Close() error { return h.c.Close() }

// h2FramingClient keeps one live h2TestConn to addr, dialling again after a
// connection error.
type h2FramingClient struct {
	addr string
	c    *h2TestConn
}

func (h *h2FramingClient) conn(t testing.TB) *h2TestConn {
	t.Helper()
	if h.c != nil && !h.c.dead {
		return h.c
	}
	h.Close()
	c, err := dialH2Framing(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return c
}

func (h *h2FramingClient) Close() {
	if h.c != nil {
		h.c.Close()
	}
}

// h2Answer is what became of one stream.
type h2Answer struct {
	status int    // 0: no response header
	reason string // its Levee-Error
	reset  bool   // RST_STREAM
	goaway bool   // the connection was closed (GOAWAY or EOF)
}

// do sends one request: a HEADERS frame of fields, then data as DATA
// frames (none: HEADERS ends the stream), and reads until the stream ends.
func (h *h2TestConn) do(fields [][2]string, data []string) (h2Answer, error) {
	var a h2Answer
	id := h.next
	h.next += 2
	h.buf.Reset()
	for _, f := range fields {
		if err := h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return a, err
		}
	}
	h.c.SetDeadline(time.Now().Add(guard))
	err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(),
		EndStream: len(data) == 0, EndHeaders: true})
	for i, d := range data {
		if err == nil {
			err = h.fr.WriteData(id, i == len(data)-1, []byte(d))
		}
	}
	if err != nil {
		h.dead = true
		return a, err
	}
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.dead = true
			if errors.Is(err, io.EOF) || closedErr(err) {
				a.goaway = true
				return a, nil
			}
			return a, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			h.dead = true
			if f.LastStreamID < id || f.ErrCode != http2.ErrCodeNo {
				a.goaway = true
				return a, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				a.reset = true
				return a, nil
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			var code int
			fmt.Sscan(f.PseudoValue("status"), &code)
			if code >= 200 && a.status == 0 { // not an interim 100
				a.status = code
				for _, hf := range f.RegularFields() {
					if strings.EqualFold(hf.Name, reply.Error) {
						a.reason = hf.Value
					}
				}
			}
			if f.StreamEnded() {
				return a, nil
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			if n := len(f.Data()); n > 0 {
				h.fr.WriteWindowUpdate(0, uint32(n))
				h.fr.WriteWindowUpdate(id, uint32(n))
			}
			if f.StreamEnded() {
				return a, nil
			}
		}
	}
}

// h2Case is one HTTP/2 request and what must come of it.
type h2Case struct {
	name   string
	fields [][2]string // pseudo-header fields first, as sent
	data   []string    // DATA frames; none: HEADERS ends the stream
	// status is levee's answer; 0: the stream is reset or the connection
	// closed, with no answer.
	status  int
	reason  string
	orReset bool // a reset instead of the answer will do
	fwds    []fwd
}

// h2req is a request for framing.test: :method, :scheme, :authority and
// :path, then extra fields as "name: value".
func h2req(method, path string, extra ...string) [][2]string {
	f := [][2]string{{":method", method}, {":scheme", "http"}, {":authority", framingHost}, {":path", path}}
	for _, e := range extra {
		name, value, _ := strings.Cut(e[1:], ": ") // a name may start with ':'
		f = append(f, [2]string{e[:1] + name, value})
	}
	return f
}

// without drops the fields named name from f.
func without(f [][2]string, name string) [][2]string {
	var out [][2]string
	for _, x := range f {
		if x[0] != name {
			out = append(out, x)
		}
	}
	return out
}

func h2ok(name string, fields [][2]string, data []string, f fwd) h2Case {
	return h2Case{name: name, fields: fields, data: data, status: http.StatusOK, fwds: []fwd{f}}
}

func h2bad(name string, fields [][2]string, data []string, reason string) h2Case {
	return h2Case{name: name, fields: fields, data: data, status: http.StatusBadRequest, reason: reason}
}

// h2either is refused with 400 bad-framing or a reset, whichever comes first.
func h2either(name string, fields [][2]string, data []string) h2Case {
	return h2Case{name: name, fields: fields, data: data, status: http.StatusBadRequest, reason: framingBad, orReset: true}
}

// h2reset is refused by the HTTP/2 server before levee's handler: a stream
// error PROTOCOL_ERROR (RFC 9113 §8.1.1).
func h2reset(name string, fields [][2]string, data []string) h2Case {
	return h2Case{name: name, fields: fields, data: data}
}

// h2Cases: RFC 9113 §8.1.1 (content-length and DATA), §8.2 (field
// validity, connection-specific fields, cookies), §8.3 (pseudo-header
// fields); the HTTP/2-to-HTTP/1.1 attacks of PortSwigger's "HTTP/2: The
// Sequel is Always Worse" (2021: H2.CL, H2.TE, CRLF and header-name
// injection, :path, :method and :authority tricks) and its HTTP Request
// Smuggler's h2 permutations (DesyncBox.java: http2hide, h2colon, h2auth,
// h2path, h2scheme, h2name, h2method, h2space, http2case); the HTTP Garden's
// HTTP/2 transducer bugs 1 (whitespace kept around values) and 2 (empty
// names); the two content-length findings of issue 11.
var h2Cases = []h2Case{
	h2ok("GET", h2req("GET", "/x?q=1"), nil, fwd{target: "/x?q=1"}),
	h2ok("POST with content-length", h2req("POST", "/", "content-length: 5"), []string{"hello"}, helloLength),
	h2ok("POST without content-length (read whole before admission: sent with its length)", h2req("POST", "/"), []string{"hel", "lo"}, helloLength),
	h2ok("content-length 0, no DATA", h2req("POST", "/", "content-length: 0"), nil, fwd{method: "POST", framing: "length"}),
	h2bad("two content-lengths (finding: first wins)", h2req("POST", "/", "content-length: 5", "content-length: 6"), []string{"hello"}, framingBad),
	h2bad("two equal content-lengths", h2req("POST", "/", "content-length: 5", "content-length: 5"), []string{"hello"}, framingBad),
	// With DATA, net/http resets the stream when the DATA overflows the 0 it
	// read for a malformed length, perhaps before levee's 400: either.
	h2either("content-length list", h2req("POST", "/", "content-length: 5, 5"), []string{"hello"}),
	h2either("content-length not a number", h2req("POST", "/", "content-length: abc"), []string{"hello"}),
	h2either("content-length +5", h2req("POST", "/", "content-length: +5"), []string{"hello"}),
	h2bad("content-length list, no DATA", h2req("POST", "/", "content-length: 5, 5"), nil, framingBad),
	h2bad("content-length not a number, no DATA", h2req("POST", "/", "content-length: abc"), nil, framingBad),
	h2bad("content-length +5, no DATA", h2req("POST", "/", "content-length: +5"), nil, framingBad),
	h2bad("content-length -1, no DATA", h2req("POST", "/", "content-length: -1"), nil, framingBad),
	h2bad("content-length on a stream without DATA", h2req("POST", "/", "content-length: 5"), nil, framingBad),
	// Connection-specific fields are malformed (§8.2.2): reset.
	h2reset("H2.TE: transfer-encoding", h2req("POST", "/", "transfer-encoding: chunked"), []string{"0\r\n\r\n"}),
	h2reset("connection", h2req("GET", "/", "connection: keep-alive"), nil),
	h2reset("keep-alive", h2req("GET", "/", "keep-alive: 5"), nil),
	h2reset("proxy-connection", h2req("GET", "/", "proxy-connection: keep-alive"), nil),
	h2reset("upgrade", h2req("GET", "/", "upgrade: websocket"), nil),
	h2reset("te: gzip", h2req("GET", "/", "te: gzip"), nil),
	h2ok("te: trailers", h2req("GET", "/", "te: trailers"), nil, fwd{has: []string{"Te: trailers"}}),
	h2reset("http2case: upper-case name", h2req("GET", "/", "X-Foo: bar"), nil),
	h2reset("empty name (garden h2 2)", append(h2req("GET", "/"), [2]string{"", "x"}), nil),
	h2reset("h2space: name with a space", h2req("GET", "/", "transfer-encoding chunked : chunked"), nil),
	h2reset("h2colon: name with a colon", h2req("GET", "/", "transfer-encoding`chunked : chunked"), nil),
	h2reset("http2hide: CRLF in a value", h2req("GET", "/", "foo: b\r\nTransfer-Encoding: chunked"), nil),
	h2reset("LF in a value", h2req("GET", "/", "foo: b\nx: y"), nil),
	h2reset("NUL in a value", h2req("GET", "/", "foo: a\x00b"), nil),
	h2reset("CRLF in :path (h2path)", h2req("GET", "/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nx: x"), nil),
	h2bad("space in :path", h2req("GET", "/a b"), nil, targetBad),
	h2reset("h2method: :method with a request line", h2req("POST / HTTP/1.1\r\nTransfer-Encoding: chunked", "/"), nil),
	h2bad("h2method: :method with a space", h2req("GET /x", "/"), nil, parseBad),
	h2bad("leading whitespace in a value (garden h2 1)", h2req("GET", "/", "test1: \ta\t"), nil, headerBad),
	h2bad("trailing space in a value", h2req("GET", "/", "x: a "), nil, headerBad),
	// fasthttp would write the backend "a=1; 2": a cookie named 2 to Go's parser.
	h2bad("a nameless cookie (fuzz)", h2req("GET", "/", "cookie: a=1", "cookie: =2"), nil, headerBad),
	h2ok("inner whitespace in a value", h2req("GET", "/", "x: a \t b"), nil, fwd{has: []string{"X: a \t b"}}),
	h2ok("obs-text in a value", h2req("GET", "/", "x: \xff\x85"), nil, fwd{has: []string{"X: \xff\x85"}}),
	h2ok("host beside :authority, same", h2req("GET", "/", "host: framing.test"), nil, fwd{}),
	h2ok("host beside :authority, other case", h2req("GET", "/", "host: FRAMING.test"), nil, fwd{}),
	h2bad("h2auth: host unlike :authority", h2req("GET", "/", "host: other.test"), nil, hostBad),
	h2bad("two hosts", h2req("GET", "/", "host: framing.test", "host: framing.test"), nil, hostBad),
	h2ok("host and no :authority", append(without(h2req("GET", "/"), ":authority"), [2]string{"host", framingHost}), nil, fwd{}),
	h2bad("no :authority, no host", without(h2req("GET", "/"), ":authority"), nil, hostBad),
	h2bad(":authority with a space", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "framing.test evil"}, {":path", "/"}}, nil, hostBad),
	h2bad(":authority with a path", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "framing.test/x"}, {":path", "/"}}, nil, hostBad),
	h2reset(":authority with userinfo", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "u@framing.test"}, {":path", "/"}}, nil),
	h2bad(":path absolute-form", h2req("GET", "http://framing.test/x"), nil, targetBad),
	h2bad(":path * for GET", h2req("GET", "*"), nil, targetBad),
	h2bad(":path with a fragment", h2req("GET", "/x#f"), nil, targetBad),
	// The HTTP/2 server answers OPTIONS * itself (200, no handler), as net/http.
	{name: ":path * for OPTIONS", fields: h2req("OPTIONS", "*"), status: http.StatusOK},
	h2reset("empty :path", h2req("GET", ""), nil),
	h2reset("h2scheme: :scheme with a URL", [][2]string{{":method", "GET"}, {":scheme", "https://framing.test/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nx: x"}, {":authority", framingHost}, {":path", "/"}}, nil),
	h2reset(":scheme ftp", [][2]string{{":method", "GET"}, {":scheme", "ftp"}, {":authority", framingHost}, {":path", "/"}}, nil),
	h2reset("unknown pseudo-header", h2req("GET", "/", ":foo: bar"), nil),
	h2reset("pseudo-header after a regular field", append(h2req("GET", "/", "x: y"), [2]string{":path", "/again"}), nil),
	h2reset("two :path", append(h2req("GET", "/"), [2]string{":path", "/again"}), nil),
	h2reset("no :method", without(h2req("GET", "/"), ":method"), nil),
	{name: "CONNECT", fields: [][2]string{{":method", "CONNECT"}, {":authority", "framing.test:443"}},
		status: http.StatusNotImplemented, reason: "connect"},
	h2ok("cookie crumbs joined (RFC 9113 §8.2.3)", h2req("GET", "/", "cookie: a=1", "cookie: b=2"), nil, fwd{has: []string{"Cookie: a=1; b=2"}}),
	h2ok("proxy (httpoxy)", h2req("GET", "/", "proxy: http://evil.example:3128"), nil, fwd{not: []string{"Proxy"}}),
	h2ok("expect: 100-continue", h2req("POST", "/", "content-length: 5", "expect: 100-continue"), []string{"hello"},
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"Expect"}}),
	{name: "expect: unknown", fields: h2req("POST", "/", "content-length: 5", "expect: y 100-continue"), data: []string{"hello"},
		status: http.StatusExpectationFailed, reason: "expectation"},
	h2ok("forged forwarding fields", h2req("GET", "/", "x-forwarded-for: 6.6.6.6", "forwarded: for=6.6.6.6", "x-real-ip: 6.6.6.6"), nil,
		fwd{not: []string{"X-Real-Ip"}}),
}

// h2PreReadCases: a body shorter or longer than its content-length is
// refused by net/http only once the stream ends or overflows, after levee
// began to forward it; with the request pre-read (issue 11 point 1) nothing
// reaches the backend.
var h2PreReadCases = []h2Case{
	{name: "content-length larger than DATA (finding: forwarded before the 502)", fields: h2req("POST", "/", "content-length: 10"),
		data: []string{"hello"}, status: http.StatusBadRequest, reason: "bad-request-body"},
	h2reset("content-length smaller than DATA", h2req("POST", "/", "content-length: 3"), []string{"hel", "lo"}),
}

func TestFramingHTTP2(t *testing.T) {
	addr, be := framingProxy(t, true)
	h := &h2FramingClient{addr: addr}
	defer h.Close()
	for _, c := range h2Cases {
		t.Run(c.name, func(t *testing.T) { runH2(t, h.conn(t), be, c) })
	}
}

func TestFramingHTTP2PreRead(t *testing.T) {
	addr, be := framingProxy(t, true)
	for _, c := range h2PreReadCases {
		t.Run(c.name, func(t *testing.T) {
			h, err := dialH2Framing(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			runH2(t, h, be, c)
		})
	}
}

func runH2(t *testing.T, h *h2TestConn, be *wireBackend, c h2Case) {
	t.Helper()
	a, err := h.do(c.fields, c.data)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case c.status == 0 && a.status != 0:
		t.Errorf("answered %d %q, want the stream refused by a reset", a.status, a.reason)
	case c.status == 0 && !a.reset && !a.goaway:
		t.Errorf("stream neither answered nor reset")
	case c.orReset && a.reset:
	case c.status != 0 && (a.status != c.status || a.reason != c.reason):
		t.Errorf("answer %d %q (reset %v, goaway %v), want %d %q", a.status, a.reason, a.reset, a.goaway, c.status, c.reason)
	}
	checkBackend(t, be.settle(t), c.fwds)
}
