package framing

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// read parses the head of raw as levee's server does (names as sent).
func read(t testing.TB, raw string) *fasthttp.Request {
	t.Helper()
	req := new(fasthttp.Request)
	req.Header.DisableNormalizing()
	if err := req.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("fasthttp refuses %q: %v", raw, err)
	}
	return req
}

// The rules levee adds to fasthttp's, on requests fasthttp reads; the
// end-to-end table (internal/server TestFramingHTTP1) has the rest.
func TestFast(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want *string // nil: accepted
	}{
		{"GET / HTTP/1.1\r\nHost: a.test\r\nX: y\r\n\r\n", nil},
		{"GET / HTTP/1.0\r\nHost: a.test\r\n\r\n", nil},
		{"GET / HTTP/1.0\r\n\r\n", ptr(BadHost)},
		{"GET / HTTP/2.0\r\nHost: a.test\r\n\r\n", ptr(Version)},
		{"GET / HTTP/1.2\r\nHost: a.test\r\n\r\n", ptr(Version)},
		{"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", ptr(Connect)},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nX Y: z\r\n\r\n", ptr(BadHeader)},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nX: y\r\n z\r\n\r\n", ptr(BadHeader)},
		{"GET / HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n", ptr(BadHeader)},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nCookie: a=1; =2\r\n\r\n", ptr(BadHeader)},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nCookie: =2\r\n\r\n", ptr(BadHeader)},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nCookie: a=1; b; c=\r\n\r\n", nil},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: identity\r\n\r\n", ptr(BadFraming)},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", ptr(BadFraming)},
		{"POST / HTTP/1.1\r\nHost: a.test\r\ntransfer_encoding: chunked\r\n\r\n", ptr(BadFraming)},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nContent_Length: 1\r\n\r\n", ptr(BadFraming)},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\nx", nil},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nExpect: 100-continue, x\r\n\r\nx", ptr(Expectation)},
		{"GET /a#b HTTP/1.1\r\nHost: a.test\r\n\r\n", ptr(BadTarget)},
		{"GET //a://b HTTP/1.1\r\nHost: a.test\r\n\r\n", ptr(BadTarget)},
		{"GET ftp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", ptr(BadTarget)},
		{"GET http://a.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n", nil},
		{"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n", ptr(BadHost)},
		// A host fasthttp's URI cannot parse would route on "/" whatever
		// the target.
		{"GET /api HTTP/1.1\r\nHost: a.test:x\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: a:b:c\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: ]\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: :80\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: [::1\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: [x]\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: a]b\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: [::1]x\r\n\r\n", ptr(BadHost)},
		{"GET /api HTTP/1.1\r\nHost: a.test:8080\r\n\r\n", nil},
		{"GET /api HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n", nil},
		{"GET /api HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", nil},
		{"GET /api HTTP/1.1\r\nHost: [::1]\r\n\r\n", nil},
		{"GET http://a.test:x/api HTTP/1.1\r\nHost: a.test\r\n\r\n", ptr(BadHost)},
	} {
		got := Fast(read(t, tc.raw))
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%q refused: %s", tc.raw, got.Reason)
		case tc.want != nil && (got == nil || got.Reason != *tc.want):
			t.Errorf("%q: %v, want %s", tc.raw, got, *tc.want)
		}
	}
}

func ptr(s string) *string { return &s }

// An absolute-form target becomes origin form, its authority the Host.
func TestFastAbsoluteForm(t *testing.T) {
	for _, tc := range []struct{ target, method, host, uri string }{
		{"http://a.test/x?y", "GET", "a.test", "/x?y"},
		{"HTTPS://a.test:8443", "GET", "a.test:8443", "/"},
		{"http://a.test?q", "GET", "a.test", "/?q"},
		{"http://a.test", "OPTIONS", "a.test", "*"},
	} {
		req := read(t, tc.method+" "+tc.target+" HTTP/1.1\r\nHost: other.test\r\n\r\n")
		if r := Fast(req); r != nil {
			t.Fatalf("%s refused: %s", tc.target, r.Reason)
		}
		if h, u := string(req.Header.Host()), string(req.Header.RequestURI()); h != tc.host || u != tc.uri {
			t.Errorf("%s: Host %q target %q, want %q %q", tc.target, h, u, tc.host, tc.uri)
		}
		if p, h := string(req.URI().PathOriginal()), string(req.URI().Host()); h != tc.host || tc.uri != "*" && !strings.HasPrefix(tc.uri, p) {
			t.Errorf("%s: parsed URI host %q path %q", tc.target, h, p)
		}
	}
}

// Every request is checked, so an accepted one costs no allocation, nor
// does a refusal.
func TestFastAllocatesNothing(t *testing.T) {
	for _, raw := range []string{
		"GET /photos/1?size=large HTTP/1.1\r\nHost: photos.test\r\nUser-Agent: curl/8\r\nAccept: */*\r\n" +
			"Cookie: a=b\r\nX-Request-Id: 42\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nX Y: z\r\n\r\n",
	} {
		req := read(t, raw)
		if n := testing.AllocsPerRun(100, func() { Fast(req) }); n != 0 {
			t.Errorf("%v allocations checking %q", n, raw)
		}
	}
}

func TestHTTP(t *testing.T) {
	ok := func() *http.Request {
		r, _ := http.NewRequest("POST", "http://a.test/x", strings.NewReader("hello"))
		r.RequestURI, r.ContentLength = "/x", 5
		r.Header.Set("Content-Length", "5")
		return r
	}
	for _, tc := range []struct {
		name string
		edit func(r *http.Request)
		want *string
	}{
		{"ok", func(*http.Request) {}, nil},
		{"CONNECT", func(r *http.Request) { r.Method = "CONNECT" }, ptr(Connect)},
		{"method with a space", func(r *http.Request) { r.Method = "GET /" }, ptr(BadRequest)},
		{"absolute :path", func(r *http.Request) { r.RequestURI = "http://a.test/x" }, ptr(BadTarget)},
		{"* for POST", func(r *http.Request) { r.RequestURI = "*" }, ptr(BadTarget)},
		{"no authority", func(r *http.Request) { r.Host = "" }, ptr(BadHost)},
		{"host unlike :authority", func(r *http.Request) { r.Header.Set("Host", "b.test") }, ptr(BadHost)},
		{"two content-lengths", func(r *http.Request) { r.Header.Add("Content-Length", "6") }, ptr(BadFraming)},
		{"content-length unlike the stream", func(r *http.Request) { r.ContentLength = 0 }, ptr(BadFraming)},
		{"value with edge whitespace", func(r *http.Request) { r.Header.Set("X", " y") }, ptr(BadHeader)},
		{"expect", func(r *http.Request) { r.Header.Set("Expect", "foo") }, ptr(Expectation)},
		{"nameless cookie", func(r *http.Request) { r.Header["Cookie"] = []string{"a=1", "=2"} }, ptr(BadHeader)},
		{"cookies", func(r *http.Request) { r.Header["Cookie"] = []string{"a=1", "b=2; c"} }, nil},
	} {
		r := ok()
		tc.edit(r)
		got := HTTP(r)
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%s refused: %s", tc.name, got.Reason)
		case tc.want != nil && (got == nil || got.Reason != *tc.want):
			t.Errorf("%s: %v, want %s", tc.name, got, *tc.want)
		}
	}
}
