package chunked

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/ascii"
)

// FuzzReader decodes any bytes, read in pieces of any size, and checks
// more than that it does not panic:
//   - the body is never longer than the input;
//   - an accepted body is what an independent walk of the input reads
//     (walk), which proves every framing line ends in CRLF with no other
//     CR or LF, the sizes are hex, and each line is within its limit;
//   - the decoder stops at the body's end: what follows is left unread;
//   - a decoded body, encoded again and decoded, is the same bytes;
//   - a line over its limit is refused without consuming any of it.
func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		// A request after the input: the decoder must leave what follows
		// the body's end unread.
		full := append(bytes.Clone(in), "GET / HTTP/1.1\r\n\r\n"...)
		src := bytes.NewReader(full)
		br := bufio.NewReaderSize(&steps{r: src, n: int(step)}, 64<<10)
		var r Reader
		body, err := io.ReadAll(readerOf{&r, br})
		consumed := len(full) - src.Len() - br.Buffered()
		if len(body) > len(full) {
			t.Fatalf("body of %d bytes from %d of input", len(body), len(full))
		}
		want, n, werr := walk(full)
		if err != nil {
			if err == Error("line too long") && werr != errLong {
				t.Fatalf("refused a line as too long, the walk: %v", werr)
			}
			if err == Error("line too long") && consumed != n {
				t.Fatalf("consumed %d bytes, the long line starts at %d", consumed, n)
			}
			if werr == nil {
				t.Fatalf("refused (%v) what the walk reads as %q", err, want)
			}
			return
		}
		if werr != nil {
			t.Fatalf("accepted %q, the walk refuses it: %v", body, werr)
		}
		if !bytes.Equal(body, want) || consumed != n {
			t.Fatalf("body %q after %d bytes, the walk: %q after %d", body, consumed, want, n)
		}
		if rest, _ := io.ReadAll(br); !bytes.Equal(rest, full[n:]) {
			t.Fatalf("left %q after the body, want %q", rest, full[n:])
		}
		// Encoded again (in chunks of step bytes), twice in a row.
		enc := encode(body, int(step)+1)
		br = bufio.NewReader(bytes.NewReader(append(enc, enc...)))
		for i := range 2 {
			var r Reader
			again, err := io.ReadAll(readerOf{&r, br})
			if err != nil || !bytes.Equal(again, body) {
				t.Fatalf("re-encoded body %d: %q, %v; want %q", i+1, again, err, body)
			}
		}
	})
}

// steps reads at most n bytes at a time (0: any).
type steps struct {
	r io.Reader
	n int
}

func (s *steps) Read(p []byte) (int, error) {
	if s.n > 0 && len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}

// encode chunks body in chunks of at most size bytes.
func encode(body []byte, size int) []byte {
	var b bytes.Buffer
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

var errLong = errors.New("line over its limit")

// walk reads a chunked body the plain way, line by line: the oracle the
// fuzzer holds Reader to. It returns the body, the bytes it took (for
// errLong, where the long line starts), and why it stopped short.
func walk(in []byte) (body []byte, n int, err error) {
	line := func(limit int) (string, error) {
		i := bytes.IndexByte(in[n:], '\n')
		switch {
		case i < 0 && len(in)-n >= limit, i+1 > limit:
			return "", errLong
		case i < 0:
			return "", io.ErrUnexpectedEOF
		case i == 0 || in[n+i-1] != '\r' || bytes.IndexByte(in[n:n+i-1], '\r') >= 0:
			return "", errors.New("line not ended by CRLF alone")
		}
		s := string(in[n : n+i-1])
		n += i + 1
		return s, nil
	}
	for {
		l, err := line(MaxLine)
		if err != nil {
			return nil, n, err
		}
		size, ext, _ := strings.Cut(l, ";")
		if size == "" || len(size) > 15 || strings.Trim(size, "0123456789abcdefABCDEF") != "" {
			return nil, n, errors.New("bad size")
		}
		if strings.ContainsFunc(ext, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
			return nil, n, errors.New("control byte in an extension")
		}
		var k int64
		fmt.Sscanf(size, "%x", &k)
		if k == 0 {
			break
		}
		if int64(len(in)-n) < k+2 {
			return nil, n, io.ErrUnexpectedEOF
		}
		body = append(body, in[n:n+int(k)]...)
		n += int(k)
		if string(in[n:n+2]) != "\r\n" {
			return nil, n, errors.New("data without CRLF")
		}
		n += 2
	}
	for lines, total := 0, 0; ; lines++ {
		l, err := line(MaxTrailerBytes)
		if err != nil {
			return nil, n, err
		}
		if l == "" {
			return body, n, nil
		}
		total += len(l) + 2
		name, value, ok := strings.Cut(l, ":")
		switch {
		case lines == MaxTrailers || total > MaxTrailerBytes:
			return nil, n, errors.New("too many trailers")
		case !ok || name == "" || strings.IndexFunc(name, func(c rune) bool { return c > 0x7f || !ascii.IsTokenByte(byte(c)) }) >= 0:
			return nil, n, errors.New("bad trailer name")
		case strings.ContainsFunc(value, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }):
			return nil, n, errors.New("control byte in a trailer")
		}
	}
}

// fuzzSeeds are the forms the table test reads, and lines at their limits.
func fuzzSeeds() []string {
	return []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;a=b\r\nhello\r\n6\r\n world\r\n0;c\r\nX-Sum: 1\r\nY:\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n",
		"5\r\nhello\n0\r\n\r\n",
		"5\r\nhello\r\n0\n\r\n",
		"5\r\nhello\r\n0\r\n\n",
		"0\r\nX: y\n\r\n",
		"0\r\nX: y\r\n z\r\n\r\n",
		"0\r\nX: y\rZ: w\r\n\r\n",
		"5;a\x00\r\nhello\r\n0\r\n\r\n",
		"5 \r\nhello\r\n0\r\n\r\n",
		" 5\r\nhello\r\n0\r\n\r\n",
		"\t5\r\nhello\r\n0\r\n\r\n",
		"5\t;a\r\nhello\r\n0\r\n\r\n",
		"0x5\r\nhello\r\n0\r\n\r\n",
		"ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
		"000000000000005\r\nhello\r\n0\r\n\r\n",
		"5\r\nhel",
		"0\r\n: y\r\n\r\n",
		"5;" + strings.Repeat("e", MaxLine-5) + "\r\nhello\r\n0\r\n\r\n",
		"5;" + strings.Repeat("e", MaxLine-4) + "\r\nhello\r\n0\r\n\r\n",
		"0\r\nX: " + strings.Repeat("v", MaxTrailerBytes-5) + "\r\n\r\n",
		"0\r\nX: " + strings.Repeat("v", MaxTrailerBytes-4) + "\r\n\r\n",
		"0\r\n" + strings.Repeat("X: y\r\n", MaxTrailers+1) + "\r\n",
	}
}
