package server

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/chunked"
	"github.com/leveeproxy/levee/internal/framing"
)

// strictChunked is a client's chunked request body on the fasthttp engine,
// decoded by levee's strict decoder (package chunked) rather than fasthttp's.
// fasthttp's decoder is lenient: a bare LF ends its trailer section (so a
// request pipelined behind "0\n\n" is served as a second request where
// another parser reads it as part of the first), and it passes a folded or
// LF-ended trailer line, white space after the size and control bytes in
// an extension. Those are refused here (docs/http.md, RFC 9112 §7.1).
//
// fasthttp offers no way to read a streamed body's raw bytes, so
// strictChunked reads them from the connection's reader that fasthttp's
// stream holds, in its unexported fields (found once, by reflection, in
// fastStream; TestFastStreamLayout fails when a fasthttp upgrade moves
// them). At the body's end it marks fasthttp's stream ended, so fasthttp
// reads the next request where the body ended; after an error, failed, so
// fasthttp closes the connection. fasthttp itself never reads the body:
// one levee did not read to its end closes the connection (serveFast),
// rather than being skipped by fasthttp's decoder.
//
// The zero value fails every read; start sets one up per request. Not
// safe for concurrent use.
type strictChunked struct {
	br     *bufio.Reader
	stream unsafe.Pointer // fasthttp's *requestStream
	dec    chunked.Reader
	done   bool  // read to its end
	err    error // what ended the reads (io.EOF at the end)
}

// errNoStrictChunked is a chunked body levee cannot decode itself (a
// fasthttp whose stream it does not know): refused, never read leniently.
var errNoStrictChunked = errors.New("server: chunked request body: fasthttp's stream is not one levee can read")

// start sets b up to decode the chunked body that fasthttp's stream bs
// would have, and reports whether it can; if not, b's reads fail.
func (b *strictChunked) start(bs io.Reader) bool {
	*b = strictChunked{}
	if !fastStream.ok || reflect.TypeOf(bs) != fastStream.typ {
		return false
	}
	p := reflect.ValueOf(bs).UnsafePointer()
	br := *(**bufio.Reader)(unsafe.Add(p, fastStream.reader))
	if br == nil {
		return false
	}
	*b = strictChunked{br: br, stream: p, dec: chunked.Reader{RefuseTrailer: framing.RefusedTrailer}}
	return true
}

func (b *strictChunked) Read(p []byte) (int, error) {
	switch {
	case b.err != nil:
		return 0, b.err
	case b.br == nil:
		return 0, errNoStrictChunked
	}
	n, err := b.dec.Read(b.br, p)
	switch {
	case err == io.EOF:
		*(*bool)(unsafe.Add(b.stream, fastStream.eof)) = true
		b.done = true
	case err != nil:
		*(*bool)(unsafe.Add(b.stream, fastStream.failed)) = true
	}
	b.err = err
	return n, err
}

// fastStream is where fasthttp's request stream keeps what strictChunked
// needs: the type, and the offsets of its fields reader (*bufio.Reader),
// eof and failed (bool). ok is false when any is missing.
var fastStream = findFastStream()

type streamLayout struct {
	typ                 reflect.Type
	reader, eof, failed uintptr
	ok                  bool
}

// findFastStream learns fasthttp's request stream from one it makes for a
// chunked body.
func findFastStream() (l streamLayout) {
	var req fasthttp.Request
	req.Header.SetContentLength(-1) // chunked
	if err := req.ContinueReadBodyStream(bufio.NewReader(strings.NewReader("0\r\n\r\n")), 0); err != nil {
		return l
	}
	bs := req.BodyStream()
	t := reflect.TypeOf(bs)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return l
	}
	field := func(name string, typ reflect.Type) (uintptr, bool) {
		f, ok := t.Elem().FieldByName(name)
		return f.Offset, ok && f.Type == typ && len(f.Index) == 1
	}
	var ok [3]bool
	l.reader, ok[0] = field("reader", reflect.TypeFor[*bufio.Reader]())
	l.eof, ok[1] = field("eof", reflect.TypeFor[bool]())
	l.failed, ok[2] = field("failed", reflect.TypeFor[bool]())
	l.typ, l.ok = t, ok == [3]bool{true, true, true}
	return l
}
