package forward

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
)

// fuzzResponses seed FuzzReadHead: ordinary heads and the tricks a backend
// (or a body smuggled into one) might play with a response's framing.
var fuzzResponses = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
	strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 9) + "HTTP/1.1 200 OK\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nhello",
	"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
	"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
	"HTTP/1.0 200 OK\r\n\r\nto the close",
	"HTTP/1.1 099 Low\r\n\r\n",
	"HTTP/1.1 2000 Long\r\n\r\n",
	"HTTP/1.1 200\r\n\r\n",
	"HTTP/2.0 200 OK\r\n\r\n",
}

// FuzzReadHead feeds any bytes to readHead, over fasthttp's
// ResponseHeader.Read, as a backend connection would, and checks what
// levee would act on: it does not panic, reads no more than it was given,
// never returns an interim, 101 or out-of-range status, nor a field name
// that is not a token or a value with a control byte, and frames the body one way
// (chunked only with a chunked Transfer-Encoding and no Content-Length; a
// length only from Content-Length fields that all say it).
func FuzzReadHead(f *testing.F) {
	for _, s := range fuzzResponses {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		src := bytes.NewReader(raw)
		br := bufio.NewReaderSize(src, 4096) // HostClient's default
		var resp fasthttp.Response
		resp.Header.DisableNormalizing()
		err := readHead(&resp, br)
		if consumed := len(raw) - src.Len() - br.Buffered(); consumed < 0 || consumed > len(raw) {
			t.Fatalf("consumed %d of %d bytes", consumed, len(raw))
		}
		if err != nil {
			return
		}
		h := &resp.Header
		if code := h.StatusCode(); code < 200 || code > 599 {
			t.Fatalf("returned the status %d", code)
		}
		var cls []string
		var te []string
		for k, v := range h.All() {
			for _, c := range k {
				if !ascii.IsTokenByte(c) {
					t.Fatalf("field name %q", k)
				}
			}
			for _, c := range v {
				if c < ' ' && c != '\t' || c == 0x7f {
					t.Fatalf("field %q: value %q", k, v)
				}
			}
			switch {
			case ascii.EqualFold(k, "content-length"):
				cls = append(cls, string(v))
			case ascii.EqualFold(k, "transfer-encoding"):
				te = append(te, string(v))
			}
		}
		switch n := h.ContentLength(); {
		case n == -1:
			if len(te) == 0 && !ascii.EqualFold(h.Peek("Transfer-Encoding"), "chunked") {
				t.Fatalf("chunked without Transfer-Encoding: %q", raw)
			}
		case n >= 0:
			if len(te) > 0 {
				t.Fatalf("framed by length %d beside Transfer-Encoding %q", n, te)
			}
			for _, v := range cls {
				if v != strconv.Itoa(n) && strings.TrimLeft(v, "0") != strings.TrimLeft(strconv.Itoa(n), "0") {
					t.Fatalf("length %d, Content-Length %q", n, cls)
				}
			}
		}
	})
}
