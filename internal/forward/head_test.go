package forward

import (
	"bufio"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/valyala/fasthttp"
)

func TestCheckHead(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nX-Tab: a\tb\r\nX-Text: caf\xe9\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n"
	for _, c := range []struct {
		name, head string
		want       error // nil: accepted
	}{
		{"plain", ok, nil},
		{"interim then final", "HTTP/1.1 100 Continue\r\n\r\n" + ok, nil},
		{"bare LF", "HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\n\r\n", errHeadBareLF},
		{"bare LF status", "HTTP/1.1 200 OK\n\r\n", errHeadBareLF},
		{"bare CR", "HTTP/1.1 200 OK\r\nX-A: 1\rX-B: 2\r\n\r\n", errHeadBareCR},
		{"CR in status", "HTTP/1.1 200 O\rK\r\n\r\n", errHeadBareCR},
		{"NUL", "HTTP/1.1 200 OK\r\nX-A: 1\x00\r\n\r\n", errHeadValue},
		{"DEL", "HTTP/1.1 200 OK\r\nX-A: 1\x7f\r\n\r\n", errHeadValue},
		{"control in status", "HTTP/1.1 200 O\x01K\r\n\r\n", errHeadStatus},
		{"no reason", "HTTP/1.1 200\r\n\r\n", nil},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\n\r\n", nil},
		{"status 000", "HTTP/1.1 000 OK\r\n\r\n", errHeadStatus},
		{"status 099", "HTTP/1.1 099 Low\r\n\r\n", errHeadStatus},
		{"status 600", "HTTP/1.1 600 High\r\n\r\n", errHeadStatus},
		{"status 2000", "HTTP/1.1 2000 Long\r\n\r\n", errHeadStatus},
		{"HTTP/2.0", "HTTP/2.0 200 OK\r\n\r\n", errHeadStatus},
		{"HTTP/0.0", "HTTP/0.0 200 OK\r\n\r\n", errHeadStatus},
		{"fold", "HTTP/1.1 200 OK\r\nX-A: 1\r\n\t2\r\n\r\n", errHeadFold},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", errHeadName},
		{"space in name", "HTTP/1.1 200 OK\r\nX A: 0\r\n\r\n", errHeadName},
		{"empty name", "HTTP/1.1 200 OK\r\n: 0\r\n\r\n", errHeadName},
		{"no colon", "HTTP/1.1 200 OK\r\nX-A\r\n\r\n", errHeadNoColon},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\n", errHeadTwoLengths},
		{"length and TE", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", errHeadLengthTE},
		{"100 fields", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: 1\r\n", 100) + "\r\n", nil},
		{"101 fields", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: 1\r\n", 101) + "\r\n", errHeadFields},
		{"too large", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("x", 4096) + "\r\n\r\n", errHeadTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			// One byte a read: the head arrives across many reads.
			br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(c.head)), 4096)
			var resp fasthttp.Response
			err := readHead(&resp, br)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("readHead: %v, want %v", err, c.want)
			}
			if c.want != nil && !refusedHead(err) {
				t.Errorf("%v is not a refused head: it would be retried", err)
			}
		})
	}
}
