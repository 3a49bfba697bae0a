package h1loop

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/framing"
)

// readFast reads a request head from b as levee's server does (names as
// sent, a read buffer of size bytes, its header limit) and returns it and
// the bytes it consumed.
func readFast(b []byte, size int) (*fasthttp.Request, int, error) {
	r := bytes.NewReader(b)
	br := bufio.NewReaderSize(r, size)
	req := new(fasthttp.Request)
	req.Header.DisableNormalizing()
	err := req.Header.Read(br)
	return req, len(b) - r.Len() - br.Buffered(), err
}

// FuzzParseHeadAgreesWithFasthttp: a head ParseHead calls Simple is one
// fasthttp reads to the same byte and framing.Fast lets through, with the
// method, target, path, Host, version, close, body and fields ParseHead
// read; and where it asks for more, fasthttp reads no head either. The
// seeds are the tables of head_test.go; testdata/fuzz keeps the corpus.
func FuzzParseHeadAgreesWithFasthttp(f *testing.F) {
	for _, tc := range accepted {
		f.Add([]byte(tc.head+tc.tail), uint16(4096))
		f.Add([]byte(tc.head), uint16(len(tc.head)))
		f.Add([]byte(tc.head[:len(tc.head)/2]), uint16(4096))
	}
	for _, tc := range refused {
		f.Add([]byte(tc.head), uint16(4096))
	}
	f.Fuzz(func(t *testing.T, b []byte, m uint16) {
		check(t, b, max(int(m), 16)) // 16: bufio's least buffer
	})
}

// check parses b and checks ParseHead's answer against fasthttp's and
// framing's, and returns it.
func check(t *testing.T, b []byte, max int) Result {
	t.Helper()
	var h Head
	r := ParseHead(b, max, &h)
	switch r {
	case Simple:
		agree(t, b, max, &h)
	case NeedMore:
		if len(b) >= max || bytes.Contains(b, []byte("\r\n\r\n")) {
			t.Fatalf("NeedMore on %d bytes (max %d): %q", len(b), max, b)
		}
		if _, n, err := readFast(b, max); err == nil {
			t.Fatalf("NeedMore, but fasthttp read a head of %d bytes: %q", n, b)
		}
	case NotSimple:
	default:
		t.Fatalf("result %v", r)
	}
	return r
}

// TestParseHeadAgreesOnGenerated checks heads built from the pieces the
// subset's rules are about, near both sides of each, which random bytes
// reach only slowly: a deterministic companion of the fuzzer.
func TestParseHeadAgreesOnGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	var visible []string
	for c := byte(0x21); c <= 0x7e; c++ {
		visible = append(visible, string(c))
	}
	odd := []string{" ", "\t", "\r", "\n", "\x00", "\x7f", "\x80", "\xff", "%", "#", ".", "/", "?", ":", "[", "]", "@", "_", "-"}
	word := func(n int, extra []string) string {
		var b strings.Builder
		for range rng.IntN(n) {
			if rng.IntN(8) == 0 {
				b.WriteString(pick(extra))
			} else {
				b.WriteString(pick(visible))
			}
		}
		return b.String()
	}
	// Each piece is one of its good forms, or now and then one of its bad.
	choose := func(good, bad []string) string {
		if rng.IntN(8) == 0 {
			return pick(bad)
		}
		return pick(good)
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}
	badMethods := []string{"get", "TRACE", "CONNECT", "GE", "GETS", "G(T", ""}
	versions := []string{"HTTP/1.1", "HTTP/1.0"}
	badVersions := []string{"HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/1.1 ", "HTTP/1.", ""}
	hosts := []string{"a", "a.test", "a:80", "a:", ":80", "!$&'()*+,;=", "A-Z_0.9~"}
	badHosts := []string{"", "[::1]", "[::1]:80", "]", "a:b:c", "a:x", "a b", "u@a", "a%41", "a/b", "\xc3\xa9"}
	names := []string{"Cookie", "TE", "Keep-Alive", "X-A", "Accept", "connection", "Content-Length", "Proxy", "X_A"}
	badNames := []string{"Host", "host", "Content_Length", "Transfer-Encoding", "transfer_encoding", "Expect",
		"Upgrade", "Trailer", "HTTP2-Settings", "X A", "X-A ", " X", "", "X\x00", "X\xff"}
	values := []string{"0", "close", "Close", "keep-alive", "Keep-Alive", "a", "a b", "a\tb", " x ", ""}
	badValues := []string{"00", "0, 0", "close, keep-alive", "upgrade", "chunked", "identity", "100-continue", "a\rb", "\x80", "\x00"}
	ends := []string{"\r\n"}
	badEnds := []string{"\n", "\r", "\r\r\n", "\n\r", ""}
	simple := 0
	const runs = 50000
	for range runs {
		var b strings.Builder
		b.WriteString(choose(methods, badMethods) + " /" + word(12, odd) + " " + choose(versions, badVersions) + choose(ends, badEnds))
		if rng.IntN(8) > 0 {
			b.WriteString("Host: " + choose(hosts, badHosts) + choose(ends, badEnds))
		}
		for range rng.IntN(6) {
			name, value := choose(names, badNames), choose(values, badValues)
			if rng.IntN(4) == 0 {
				name = word(10, odd)
			}
			if rng.IntN(4) == 0 {
				value = word(16, odd)
			}
			b.WriteString(name + ":" + pick([]string{"", " ", "\t", "  "}) + value + choose(ends, badEnds))
		}
		b.WriteString(choose(ends, badEnds) + pick([]string{"", "GET / HTTP/1.1\r\n", "\x00"}))
		if check(t, []byte(b.String()), 4096) == Simple {
			simple++
		}
	}
	if simple < runs/25 {
		t.Errorf("%d of %d generated heads Simple: the generator proves little", simple, runs)
	}
	t.Logf("%d of %d generated heads Simple", simple, runs)
}

// agree checks a Simple head h of b against fasthttp and framing.Fast.
func agree(t *testing.T, b []byte, max int, h *Head) {
	t.Helper()
	n := h.Len
	if n > max || n > len(b) {
		t.Fatalf("head of %d bytes, max %d, buffer %d", n, max, len(b))
	}
	for _, in := range [][]byte{b, b[:n]} {
		if _, got, err := readFast(in, max); err != nil || got != n {
			t.Fatalf("Simple head of %d bytes; fasthttp read %d of %d, error %v: %q", n, got, len(in), err, in)
		}
	}
	req, _, _ := readFast(b, max)
	if r := framing.Fast(req); r != nil {
		t.Fatalf("Simple, but framing refuses it (%v): %q", r.Reason, b[:n])
	}
	rh := &req.Header
	proto := "HTTP/1.1"
	if h.HTTP10 {
		proto = "HTTP/1.0"
	}
	length := -2 // fasthttp's no framing field: no body on a request
	if h.Length {
		length = 0
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"method", string(h.Method), string(rh.Method())},
		{"target", string(h.Target), string(rh.RequestURI())},
		{"path", string(h.Path), string(req.URI().Path())},
		{"host", string(h.Host), string(rh.Host())},
		{"URI host", string(bytes.ToLower(h.Host)), string(req.URI().Host())}, // "" if fasthttp cannot parse it
		{"protocol", proto, string(rh.Protocol())},
		{"close", h.Close, rh.ConnectionClose()},
		{"content-length", length, rh.ContentLength()},
		{"raw fields", string(b[len(h.Method)+len(h.Target)+len(" HTTP/1.1\r\n")+1 : n]), string(rh.RawHeaders())},
	} {
		if c.got != c.want {
			t.Fatalf("%s: ParseHead %q, fasthttp %q: %q", c.what, c.got, c.want, b[:n])
		}
	}
	i := 0
	for k, v := range rh.AllInOrder() {
		if i == h.NField {
			t.Fatalf("fasthttp reads more than %d fields: %q", h.NField, b[:n])
		}
		if f := h.Field[i]; !bytes.Equal(f.Name, k) || !bytes.Equal(f.Value, v) {
			t.Fatalf("field %d: ParseHead %q: %q, fasthttp %q: %q", i, f.Name, f.Value, k, v)
		}
		i++
	}
	if i != h.NField {
		t.Fatalf("fasthttp reads %d fields, ParseHead %d: %q", i, h.NField, b[:n])
	}
	// The subset, as fasthttp read the fields: nothing that asks the server
	// for more than one bodiless exchange, and no field Connection names.
	conns := 0
	for k := range rh.AllInOrder() {
		for _, no := range []string{"expect", "upgrade", "http2-settings", "trailer", "transfer-encoding"} {
			if ascii.EqualFold(k, no) {
				t.Fatalf("Simple with %s: %q", k, b[:n])
			}
		}
		if ascii.EqualFold(k, "connection") {
			if conns++; conns > 1 {
				t.Fatalf("Simple with two Connection fields: %q", b[:n])
			}
		}
	}
	// Its own fields (Host, Content-Length, User-Agent, ...) fasthttp keeps
	// apart, under its names; each is one of h's. Cookie fields it joins, and
	// Connection: close it may add.
	for k, v := range rh.All() {
		if ascii.EqualFold(k, "cookie") || ascii.EqualFold(k, "connection") {
			continue
		}
		if !hasField(h, k, v) {
			t.Fatalf("fasthttp has %q: %q, ParseHead does not: %q", k, v, b[:n])
		}
	}
	// A prefix of the head is no head.
	for _, k := range []int{n - 1, n / 2} {
		var p Head
		if r := ParseHead(b[:k], max, &p); r != NeedMore {
			t.Fatalf("%v on %d bytes of a %d-byte head: %q", r, k, n, b[:k])
		}
	}
}

func hasField(h *Head, name, value []byte) bool {
	for _, f := range h.Fields() {
		if ascii.EqualFold(f.Name, string(name)) && bytes.Equal(f.Value, value) {
			return true
		}
	}
	return false
}

// BenchmarkFasthttpHead reads BenchmarkParseHead's heads with fasthttp, as
// levee's server does, for comparison.
func BenchmarkFasthttpHead(b *testing.B) {
	for _, bc := range []struct{ name, head string }{{"browser", browserHead}, {"curl", curlHead}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := []byte(bc.head)
			r := bytes.NewReader(buf)
			br := bufio.NewReaderSize(r, 4096)
			var h fasthttp.RequestHeader
			h.DisableNormalizing()
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(buf)
				br.Reset(r)
				if err := h.Read(br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
