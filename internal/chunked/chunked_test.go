package chunked

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// decode reads in through a Reader with p of size step, and returns the
// body, the error that ended it (nil for io.EOF) and the bytes left unread.
func decode(in string, step int, refuse func([]byte) bool) (body string, err error, rest string) {
	br := bufio.NewReaderSize(strings.NewReader(in), 64<<10)
	r := Reader{RefuseTrailer: refuse}
	var b strings.Builder
	p := make([]byte, step)
	for {
		n, e := r.Read(br, p)
		b.Write(p[:n])
		if e != nil {
			if e != io.EOF {
				err = e
			}
			break
		}
	}
	left, _ := io.ReadAll(br)
	return b.String(), err, string(left)
}

func TestReader(t *testing.T) {
	long := strings.Repeat("a", MaxLine)
	for _, tc := range []struct {
		name, in string
		body     string // when accepted
		bad      string // Error text, "eof" for io.ErrUnexpectedEOF; "" accepted
	}{
		{"one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", ""},
		{"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", ""},
		{"leading zeros", "005\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"extension", "5;a=b\r\nhello\r\n0;last\r\n\r\n", "hello", ""},
		{"extension with a tab and a quote", "5;a=\"b\tc\"\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"trailers", "5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other:\r\n\r\n", "hello", ""},
		{"empty body", "0\r\n\r\n", "", ""},
		{"15 hex digits", "000000000000005\r\nhello\r\n0\r\n\r\n", "hello", ""},
		{"16 hex digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", "", "chunk size too large"},
		{"bare LF after the size", "5\nhello\r\n0\r\n\r\n", "", "bare LF"},
		{"bare LF after the data", "5\r\nhello\n0\r\n\r\n", "", "chunk data not followed by CRLF"},
		{"bare LF after the last chunk", "5\r\nhello\r\n0\n\r\n", "", "bare LF"},
		{"bare LF ends the trailers", "5\r\nhello\r\n0\r\n\n", "", "bare LF"},
		{"bare LF ends a trailer line", "0\r\nX: y\n\r\n", "", "bare LF"},
		{"bare CR in a trailer", "0\r\nX: y\rZ: w\r\n\r\n", "", "bare CR"},
		{"bare CR after the size", "5\r\r\nhello\r\n0\r\n\r\n", "", "bare CR"},
		{"obs-fold trailer", "0\r\nX: y\r\n z\r\n\r\n", "", "obs-fold in a trailer"},
		{"obs-fold trailer with a tab", "0\r\nX: y\r\n\tz\r\n\r\n", "", "obs-fold in a trailer"},
		{"NUL in an extension", "5;a\x00\r\nhello\r\n0\r\n\r\n", "", "control byte in a chunk extension"},
		{"DEL in an extension", "5;a\x7f\r\nhello\r\n0\r\n\r\n", "", "control byte in a chunk extension"},
		{"VT in an extension", "5;a=\x0b\r\nhello\r\n0\r\n\r\n", "", "control byte in a chunk extension"},
		{"SP before the size", " 5\r\nhello\r\n0\r\n\r\n", "", "no chunk size"},
		{"HTAB before the size", "\t5\r\nhello\r\n0\r\n\r\n", "", "no chunk size"},
		{"SP after the size", "5 \r\nhello\r\n0\r\n\r\n", "", "bytes after the chunk size"},
		{"HTAB after the size", "5\t\r\nhello\r\n0\r\n\r\n", "", "bytes after the chunk size"},
		{"SP before ;", "5 ;a\r\nhello\r\n0\r\n\r\n", "", "bytes after the chunk size"},
		{"0x", "0x5\r\nhello\r\n0\r\n\r\n", "", "bytes after the chunk size"},
		{"empty size", "\r\n\r\n", "", "no chunk size"},
		{"trailer without a name", "0\r\n: y\r\n\r\n", "", "trailer line without a field name"},
		{"trailer without a colon", "0\r\nXY\r\n\r\n", "", "trailer line without a field name"},
		{"trailer name with a space", "0\r\nX Y: z\r\n\r\n", "", "bad trailer field name"},
		{"NUL in a trailer value", "0\r\nX: a\x00b\r\n\r\n", "", "control byte in a trailer value"},
		{"size line too long", "5;" + long + "\r\nhello\r\n0\r\n\r\n", "", "line too long"},
		{"data longer than its size", "5\r\nhello!\r\n0\r\n\r\n", "", "chunk data not followed by CRLF"},
		{"cut in the data", "5\r\nhel", "", "eof"},
		{"cut before the trailers end", "0\r\nX: y\r\n", "", "eof"},
		{"cut in the size line", "5", "", "eof"},
	} {
		for _, step := range []int{1, 3, 512} {
			body, err, _ := decode(tc.in, step, nil)
			switch {
			case tc.bad == "" && (err != nil || body != tc.body):
				t.Errorf("%s (reads of %d): got %q, %v; want %q", tc.name, step, body, err, tc.body)
			case tc.bad == "eof" && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("%s (reads of %d): got %v, want io.ErrUnexpectedEOF", tc.name, step, err)
			case tc.bad != "" && tc.bad != "eof" && err != Error(tc.bad):
				t.Errorf("%s (reads of %d): got %q, %v; want Error(%q)", tc.name, step, body, err, tc.bad)
			}
		}
	}
}

// TestReaderStopsAtTheEnd: nothing past the trailer section's empty line
// is read, so the next request on a connection starts where it should.
func TestReaderStopsAtTheEnd(t *testing.T) {
	next := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, in := range []string{"5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\nX: y\r\n\r\n"} {
		body, err, rest := decode(in+next, 4, nil)
		if body != "hello" || err != nil || rest != next {
			t.Errorf("%q: got %q, %v, rest %q; want hello, nil, %q", in, body, err, rest, next)
		}
	}
}

func TestReaderRefusesTrailer(t *testing.T) {
	refuse := func(name []byte) bool { return strings.EqualFold(string(name), "host") }
	if _, err, _ := decode("0\r\nHOST: evil\r\n\r\n", 8, refuse); err != Error("trailer field not allowed") {
		t.Errorf("Host trailer: got %v", err)
	}
	if _, err, _ := decode("0\r\nX-Host: fine\r\n\r\n", 8, refuse); err != nil {
		t.Errorf("X-Host trailer: got %v", err)
	}
}

func TestReaderTrailerBounds(t *testing.T) {
	many := strings.Repeat("X: y\r\n", MaxTrailers)
	if _, err, _ := decode("0\r\n"+many+"\r\n", 8, nil); err != nil {
		t.Errorf("%d trailers: %v", MaxTrailers, err)
	}
	if _, err, _ := decode("0\r\n"+many+"X: y\r\n\r\n", 8, nil); err != Error("trailer section too large") {
		t.Errorf("%d trailers: %v", MaxTrailers+1, err)
	}
	big := "X: " + strings.Repeat("v", MaxTrailerBytes-5) + "\r\n"
	if _, err, _ := decode("0\r\n"+big+"\r\n", 8, nil); err != nil {
		t.Errorf("one trailer of %d bytes: %v", len(big), err)
	}
	if _, err, _ := decode("0\r\n"+big+"Y: z\r\n\r\n", 8, nil); err != Error("trailer section too large") {
		t.Errorf("trailers over %d bytes: %v", MaxTrailerBytes, err)
	}
}

// pieces hands out one piece per Read, then fails: a client that sent
// them and waits for the answer. A decoder that asks for a byte past the
// body fails with errWaits.
type pieces []string

var errWaits = errors.New("read past what the client sent")

func (p *pieces) Read(b []byte) (int, error) {
	if len(*p) == 0 {
		return 0, errWaits
	}
	n := copy(b, (*p)[0])
	if n < len((*p)[0]) {
		(*p)[0] = (*p)[0][n:]
	} else {
		*p = (*p)[1:]
	}
	return n, nil
}

// TestReaderNeedsNoByteBeyond: each line is read from what is buffered,
// whatever the reads' sizes, without waiting for a byte the peer has not
// sent (a streamed response's next chunk, a client's next request).
func TestReaderNeedsNoByteBeyond(t *testing.T) {
	for _, in := range []pieces{
		{"8\r\nchunk 1\n\r\n", "8\r\nchunk 2\n\r\n0\r\n\r\n"},
		{"8\r\nchunk 1\n\r\n8\r\nchunk 2\n\r\n0\r\n\r\n"},
		{"8", "\r", "\nchunk 1\n", "\r\n8\r\nchunk 2\n\r\n0\r", "\nX: y\r\n", "\r\n"},
	} {
		br := bufio.NewReader(&in)
		var r Reader
		got, err := io.ReadAll(readerOf{&r, br})
		if err != nil || string(got) != "chunk 1\nchunk 2\n" {
			t.Errorf("got %q, %v", got, err)
		}
	}
}

type readerOf struct {
	r  *Reader
	br *bufio.Reader
}

func (r readerOf) Read(p []byte) (int, error) { return r.r.Read(r.br, p) }
