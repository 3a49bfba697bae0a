package h1loop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// accepted are Simple heads and what ParseHead must read from them. Bytes
// after the head (tail) are the next request's, or its body's.
var accepted = []struct {
	name   string
	head   string
	tail   string
	method string
	target string
	path   string
	host   string
	http10 bool
	close  bool
	length bool     // "Content-Length: 0"
	fields []string // "Name: value"
}{
	{name: "curl", head: curlHead,
		method: "GET", target: "/", path: "/", host: "example.com",
		fields: []string{"Host: example.com", "User-Agent: curl/8.5.0", "Accept: */*"}},
	{name: "browser", head: browserHead,
		method: "GET", target: "/search?q=levee&lang=en", path: "/search", host: "www.example.com",
		fields: []string{"Host: www.example.com",
			"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
			"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
			"Accept-Language: en-US,en;q=0.5", "Accept-Encoding: gzip, deflate, br, zstd",
			"Connection: keep-alive", "Cookie: session=4f2a9c; theme=dark", "Upgrade-Insecure-Requests: 1"}},
	{name: "HTTP/1.0 closes", head: "GET /a HTTP/1.0\r\nHost: a.test\r\n\r\n",
		method: "GET", target: "/a", path: "/a", host: "a.test", http10: true, close: true,
		fields: []string{"Host: a.test"}},
	{name: "HTTP/1.0 keep-alive", head: "HEAD /a HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: a.test\r\n\r\n",
		method: "HEAD", target: "/a", path: "/a", host: "a.test", http10: true,
		fields: []string{"Connection: Keep-Alive", "Host: a.test"}},
	{name: "Connection close", head: "DELETE /x/1 HTTP/1.1\r\nhost: a.test\r\nconnection: CLOSE\r\n\r\n",
		method: "DELETE", target: "/x/1", path: "/x/1", host: "a.test", close: true,
		fields: []string{"host: a.test", "connection: CLOSE"}},
	{name: "HTTP/1.0 Connection close", head: "GET / HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n",
		method: "GET", target: "/", path: "/", host: "a.test", http10: true, close: true,
		fields: []string{"Host: a.test", "Connection: close"}},
	{name: "Content-Length 0", head: "POST /api?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 0\r\n\r\n",
		method: "POST", target: "/api?x=1", path: "/api", host: "127.0.0.1:8080", length: true,
		fields: []string{"Host: 127.0.0.1:8080", "Content-Length: 0"}},
	{name: "other methods", head: "OPTIONS /o HTTP/1.1\r\nHost: a\r\n\r\n",
		method: "OPTIONS", target: "/o", path: "/o", host: "a", fields: []string{"Host: a"}},
	{name: "PUT", head: "PUT /p HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n",
		method: "PUT", target: "/p", path: "/p", host: "a", length: true, fields: []string{"Host: a", "content-length: 0"}},
	{name: "PATCH", head: "PATCH /p HTTP/1.1\r\nHost: a\r\n\r\n",
		method: "PATCH", target: "/p", path: "/p", host: "a", fields: []string{"Host: a"}},
	{name: "values trimmed", head: "GET / HTTP/1.1\r\nHost:a\r\nX-A:  one two \t\r\nX-B:\r\nX-C: \t \r\nX-D:\tq\t\r\n\r\n",
		method: "GET", target: "/", path: "/", host: "a",
		fields: []string{"Host: a", "X-A: one two", "X-B: ", "X-C: ", "X-D: q"}},
	{name: "query holds what a path may not", head: "GET /s?u=//x/./y/../%2e?&a=b? HTTP/1.1\r\nHost: a\r\n\r\n",
		method: "GET", target: "/s?u=//x/./y/../%2e?&a=b?", path: "/s", host: "a", fields: []string{"Host: a"}},
	{name: "dots that are no segment", head: "GET /.well-known/..x/a.b/.../ HTTP/1.1\r\nHost: a\r\n\r\n",
		method: "GET", target: "/.well-known/..x/a.b/.../", path: "/.well-known/..x/a.b/.../", host: "a", fields: []string{"Host: a"}},
	{name: "pipelined", head: "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n", tail: "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		method: "GET", target: "/1", path: "/1", host: "a", fields: []string{"Host: a"}},
	{name: "garbage after", head: "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n", tail: "\x00\n\n junk",
		method: "GET", target: "/1", path: "/1", host: "a", fields: []string{"Host: a"}},
	{name: "twin of no framing field", head: "GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 1\r\nTE: trailers\r\n\r\n",
		method: "GET", target: "/", path: "/", host: "a", fields: []string{"Host: a", "X_Forwarded_For: 1", "TE: trailers"}},
	{name: "every visible byte where one may be",
		head: "GET /!\"$&'()*+,-.:;<=>@[\\]^_`{|}~AZaz09?!\"$%&'()*+,-./:;<=>?@[\\]^_`{|}~ HTTP/1.1\r\n" +
			"Host: !$&'()*+,;=a-b.c_d~:8080\r\nX-All!#$%&'*+-.^_`|~09: a\tb !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\r\n\r\n",
		method: "GET", target: "/!\"$&'()*+,-.:;<=>@[\\]^_`{|}~AZaz09?!\"$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
		path: "/!\"$&'()*+,-.:;<=>@[\\]^_`{|}~AZaz09", host: "!$&'()*+,;=a-b.c_d~:8080",
		fields: []string{"Host: !$&'()*+,;=a-b.c_d~:8080", "X-All!#$%&'*+-.^_`|~09: a\tb !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"}},
	{name: "empty port", head: "GET / HTTP/1.1\r\nHost: a:\r\n\r\n",
		method: "GET", target: "/", path: "/", host: "a:", fields: []string{"Host: a:"}},
	{name: "MaxFields fields", head: manyFields(MaxFields),
		method: "GET", target: "/", path: "/", host: "a", fields: manyFieldList(MaxFields)},
}

const (
	curlHead    = "GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"
	browserHead = "GET /search?q=levee&lang=en HTTP/1.1\r\n" +
		"Host: www.example.com\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" +
		"Accept-Language: en-US,en;q=0.5\r\n" +
		"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
		"Connection: keep-alive\r\n" +
		"Cookie: session=4f2a9c; theme=dark\r\n" +
		"Upgrade-Insecure-Requests: 1\r\n" +
		"\r\n"
)

// manyFields is a head with n fields, Host the first.
func manyFields(n int) string {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\n")
	for _, f := range manyFieldList(n) {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

func manyFieldList(n int) []string {
	out := []string{"Host: a"}
	for i := 1; i < n; i++ {
		out = append(out, fmt.Sprintf("X-%d: %d", i, i))
	}
	return out
}

func TestParseHeadAccepts(t *testing.T) {
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			var h Head
			if r := ParseHead([]byte(tc.head+tc.tail), 1<<16, &h); r != Simple {
				t.Fatalf("%v, want Simple: %q", r, tc.head)
			}
			got := fmt.Sprintf("%s %s %s host=%s http10=%v close=%v length=%v len=%d",
				h.Method, h.Target, h.Path, h.Host, h.HTTP10, h.Close, h.Length, h.Len)
			want := fmt.Sprintf("%s %s %s host=%s http10=%v close=%v length=%v len=%d",
				tc.method, tc.target, tc.path, tc.host, tc.http10, tc.close, tc.length, len(tc.head))
			if got != want {
				t.Errorf("read\n%s\nwant\n%s", got, want)
			}
			var fields []string
			for _, f := range h.Fields() {
				fields = append(fields, string(f.Name)+": "+string(f.Value))
			}
			if strings.Join(fields, "\n") != strings.Join(tc.fields, "\n") {
				t.Errorf("fields\n%q\nwant\n%q", fields, tc.fields)
			}
		})
	}
}

// refused are complete heads outside the subset, one per rule.
var refused = []struct{ rule, head string }{
	{"method in lower case", "get / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"},
	{"method not in the list", "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"long method", "PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"method not a token", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"empty line first", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"two SP after method", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"two SP before version", "GET /  HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"HTAB for SP", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"absolute-form", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"authority-form", "GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"//a://b", "GET //a://b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"DEL in target", "GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"NUL in target", "GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"percent in path", "GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"empty segment", "GET /a//b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"dot segment", "GET /a/./b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"dot-dot segment", "GET /a/../b HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"trailing dot-dot", "GET /a/..?x HTTP/1.1\r\nHost: a\r\n\r\n"},
	{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n"},
	{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n"},
	{"version in lower case", "GET / http/1.1\r\nHost: a\r\n\r\n"},
	{"SP after version", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n"},
	{"bare LF after request line", "GET / HTTP/1.1\nHost: a\r\n\r\n"},
	{"bare LF after field", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"},
	{"bare LF empty line", "GET / HTTP/1.1\r\nHost: a\r\n\n"},
	{"bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n"},
	{"CR CR LF", "GET / HTTP/1.1\r\nHost: a\r\r\n\r\n"},
	{"bare CR empty line", "GET / HTTP/1.1\r\nHost: a\r\n\rX\r\n\r\n"},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n"},
	{"HTAB fold", "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\tz\r\n\r\n"},
	{"space in name", "GET / HTTP/1.1\r\nHost: a\r\nX Y: z\r\n\r\n"},
	{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX : z\r\n\r\n"},
	{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: z\r\n\r\n"},
	{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nXYZ\r\n\r\n"},
	{"name not a token", "GET / HTTP/1.1\r\nHost: a\r\nX(y): z\r\n\r\n"},
	{"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n"},
	{"DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n"},
	{"VT in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\vb\r\n\r\n"},
	{"non-ASCII value", "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n"},
	{"no Host", "GET / HTTP/1.1\r\nX: y\r\n\r\n"},
	{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n"},
	{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"},
	{"empty Host", "GET / HTTP/1.1\r\nHost: \r\n\r\n"},
	{"Host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{"Host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"},
	{"Host with percent", "GET / HTTP/1.1\r\nHost: a%2eb\r\n\r\n"},
	{"Host with slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"},
	{"Host an IP literal", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"},
	{"Host a bracket", "GET /0 HTTP/1.1\r\nHost: ]\r\n\r\n"},
	{"Host with two colons", "GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n"},
	{"Host with a port not of digits", "GET / HTTP/1.1\r\nHost: a:x\r\n\r\n"},
	{"Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"},
	{"Transfer-Encoding identity", "GET / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: identity\r\n\r\n"},
	{"Transfer_Encoding", "GET / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\n\r\n"},
	{"Content_Length", "GET / HTTP/1.1\r\nHost: a\r\nContent_Length: 0\r\n\r\n"},
	{"Content-Length not 0", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"},
	{"Content-Length 00", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 00\r\n\r\n"},
	{"Content-Length +0", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +0\r\n\r\n"},
	{"Content-Length empty", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"},
	{"Content-Length twice", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"},
	{"Content-Length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0, 0\r\n\r\n"},
	{"Expect", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n"},
	{"empty Expect", "PUT / HTTP/1.1\r\nHost: a\r\nExpect:\r\n\r\n"},
	{"Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"},
	{"HTTP2-Settings", "GET / HTTP/1.1\r\nHost: a\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"},
	{"Trailer", "GET / HTTP/1.1\r\nHost: a\r\nTrailer: X\r\n\r\n"},
	{"Connection list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret\r\n\r\n"},
	{"Connection naming a field", "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Secret\r\n\r\n"},
	{"Connection: Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n\r\n"},
	{"empty Connection", "GET / HTTP/1.1\r\nHost: a\r\nConnection:\r\n\r\n"},
	{"two Connections", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: keep-alive\r\n\r\n"},
	{"HTTP/1.0 keep-alive under another spelling", "GET / HTTP/1.0\r\nHost: a\r\nconnection: keep-alive\r\n\r\n"},
	{"too many fields", manyFields(MaxFields + 1)},
}

func TestParseHeadRefuses(t *testing.T) {
	for _, tc := range refused {
		var h Head
		if r := ParseHead([]byte(tc.head), 1<<16, &h); r != NotSimple {
			t.Errorf("%s: %v, want NotSimple: %q", tc.rule, r, tc.head)
		}
	}
}

// TestParseHeadNeedsMore: every proper prefix of a Simple head asks for more.
func TestParseHeadNeedsMore(t *testing.T) {
	for _, tc := range accepted {
		for n := range len(tc.head) {
			var h Head
			if r := ParseHead([]byte(tc.head[:n]), 1<<16, &h); r != NeedMore {
				t.Errorf("%s: %v on %d of %d bytes, want NeedMore: %q", tc.name, r, n, len(tc.head), tc.head[:n])
			}
		}
	}
}

// TestParseHeadEarly: bytes that settle it make NotSimple before the head
// ends, or before any CRLFCRLF (fasthttp reads a head ending in bare LFs).
func TestParseHeadEarly(t *testing.T) {
	for _, b := range []string{
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nHost: a\n\n",
		"GET / HTTP/1.0\n\n",
		"G\n\n",
		"GET http://a",
		"GET / HTTP/1.1\r\nX: \x00",
		"GET / HTTP/1.1\r\nHost: a\r\n x",
		"GET / HTTP/1.1\r\nHost: a\r\n\rX",
	} {
		var h Head
		if r := ParseHead([]byte(b), 1<<16, &h); r != NotSimple {
			t.Errorf("%v, want NotSimple: %q", r, b)
		}
	}
}

// TestParseHeadMax: a head of max bytes is Simple, one byte more is not,
// and a buffer of max bytes without a head's end asks no more.
func TestParseHeadMax(t *testing.T) {
	for _, tc := range accepted {
		b := []byte(tc.head + tc.tail)
		n := len(tc.head)
		var h Head
		if r := ParseHead(b, n, &h); r != Simple || h.Len != n {
			t.Errorf("%s: %v (len %d) with max = its %d bytes, want Simple", tc.name, r, h.Len, n)
		}
		if r := ParseHead(b, n-1, &h); r != NotSimple {
			t.Errorf("%s: %v with max one byte short, want NotSimple", tc.name, r)
		}
		if r := ParseHead(b[:n-1], n-1, &h); r != NotSimple {
			t.Errorf("%s: %v on max bytes without the head's end, want NotSimple", tc.name, r)
		}
		if r := ParseHead(b[:n-1], n, &h); r != NeedMore {
			t.Errorf("%s: %v one byte short of a max-byte head, want NeedMore", tc.name, r)
		}
	}
	var h Head
	for _, max := range []int{0, -1} {
		if r := ParseHead([]byte(curlHead), max, &h); r != NotSimple {
			t.Errorf("max %d: %v, want NotSimple", max, r)
		}
		if r := ParseHead(nil, max, &h); r != NotSimple {
			t.Errorf("max %d, no bytes: %v, want NotSimple", max, r)
		}
	}
	if r := ParseHead(nil, 1, &h); r != NeedMore {
		t.Errorf("no bytes: %v, want NeedMore", r)
	}
}

func TestParseHeadAllocs(t *testing.T) {
	var h Head
	for _, head := range []string{curlHead, browserHead, "GET /a/../b HTTP/1.1\r\nHost: a\r\n\r\n"} {
		b := []byte(head)
		if n := testing.AllocsPerRun(100, func() { ParseHead(b, 1<<16, &h) }); n != 0 {
			t.Errorf("%v allocations a head, want 0: %q", n, head)
		}
	}
}

func BenchmarkParseHead(b *testing.B) {
	for _, bc := range []struct{ name, head string }{{"browser", browserHead}, {"curl", curlHead}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := []byte(bc.head)
			var h Head
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if ParseHead(buf, 1<<16, &h) != Simple {
					b.Fatal("not Simple")
				}
			}
		})
	}
}

// TestNotVisible: notVisible's lowest mark is the first byte of the word
// that is not SP or visible ASCII, whatever the bytes around it.
func TestNotVisible(t *testing.T) {
	first := func(w []byte) int {
		for i, c := range w {
			if c < 0x20 || c > 0x7e {
				return i
			}
		}
		return 8
	}
	check := func(w []byte) {
		t.Helper()
		got := 8
		if m := notVisible(binary.LittleEndian.Uint64(w)); m != 0 {
			got = bits.TrailingZeros64(m) / 8
		}
		if want := first(w); got != want {
			t.Fatalf("% x: first not visible at %d, want %d", w, got, want)
		}
	}
	for c := range 256 {
		for p := range 8 {
			for _, fill := range []byte{' ', 'a', '~', 0x1f, 0x7f, 0xff, 0x00} {
				w := bytes.Repeat([]byte{fill}, 8)
				for i := range p {
					w[i] = 'a'
				}
				w[p] = byte(c)
				check(w)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	edges := []byte{0x00, 0x08, 0x09, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80, 0xfe, 0xff}
	for range 100000 {
		var w [8]byte
		for i := range w {
			w[i] = edges[rng.IntN(len(edges))]
			if rng.IntN(2) == 0 {
				w[i] = byte(rng.IntN(256))
			}
		}
		check(w[:])
	}
}

func TestHeadCopyTo(t *testing.T) {
	b := []byte("GET /a/b?q=1 HTTP/1.1\r\nHost: x.test:8080\r\nUser-Agent: t\r\nX-Empty:\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n")
	var h, dst Head
	if r := ParseHead(b, 8<<10, &h); r != Simple {
		t.Fatal(r)
	}
	buf := h.CopyTo(&dst, nil)
	for i := range b {
		b[i] = 'z' // the loop reads into its buffer again
	}
	if string(dst.Method) != "GET" || string(dst.Target) != "/a/b?q=1" || string(dst.Path) != "/a/b" ||
		string(dst.Host) != "x.test:8080" || !dst.Close || dst.Len != h.Len || string(dst.Raw) != string(buf[:dst.Len]) {
		t.Fatalf("copy %+v", dst)
	}
	var got []string
	for k, v := range dst.All() {
		got = append(got, string(k)+"="+string(v))
	}
	if want := "Host=x.test:8080 User-Agent=t X-Empty= Connection=close"; strings.Join(got, " ") != want {
		t.Fatalf("fields %q, want %q", strings.Join(got, " "), want)
	}
}

// A Cookie with a nameless pair is the full engine's to refuse.
func TestNamelessCookieIsNotSimple(t *testing.T) {
	var h Head
	for _, c := range []struct {
		cookie string
		want   Result
	}{{"a=1; b=2", Simple}, {"a=1; =2", NotSimple}, {"=2", NotSimple}, {"a", Simple}} {
		b := []byte("GET / HTTP/1.1\r\nHost: a.test\r\nCookie: " + c.cookie + "\r\n\r\n")
		if r := ParseHead(b, 8<<10, &h); r != c.want {
			t.Errorf("Cookie: %s: %v, want %v", c.cookie, r, c.want)
		}
	}
}
