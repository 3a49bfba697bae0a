// Package chunked decodes the chunked transfer coding (RFC 9112 §7.1) to
// the letter, for both directions of levee's HTTP/1.1: a client's request
// body on the fasthttp engine and a backend's response body. A chunked
// body that two parsers could end at different places is how a request is
// smuggled, or a response queue poisoned; so every leniency other parsers
// allow (a bare LF, white space around the size, control bytes in an
// extension, an obs-folded trailer) is an error here, and the caller stops
// reading the connection. The rules and their RFC sections are in
// docs/http.md.
package chunked

import (
	"bufio"
	"bytes"
	"io"

	"github.com/leveeproxy/levee/internal/ascii"
)

// Bounds of a chunked body's framing lines, each counted with its CRLF.
const (
	MaxLine         = 4 << 10 // a chunk-size line, extensions included
	MaxTrailerBytes = 16 << 10
	MaxTrailers     = 64
)

// Error is a chunked body framed otherwise than RFC 9112 §7.1 says: where
// such a body ends is not known as every reader would know it, so the
// caller reads no further on its connection.
type Error string

func (e Error) Error() string { return "chunked: " + string(e) }

// Reader decodes one chunked body strictly: a size line of at most 15 hex
// digits (no white space, no "0x"), extensions without control bytes, every
// line ending in CRLF (a bare LF or CR is refused), trailer fields without
// obs-fold, token names and values without control bytes, all within the
// bounds above. Trailers are read and dropped.
//
// The zero value is ready to read a body. A Reader is not safe for
// concurrent use; it keeps no reference to the bufio.Reader between calls,
// and reads nothing from it past the body's end.
type Reader struct {
	// RefuseTrailer, if set, reports trailer field names the body must not
	// carry (a framing or routing field a recipient could merge into the
	// header); such a trailer is an Error.
	RefuseTrailer func(name []byte) bool

	left  int64 // bytes left of the current chunk
	inSeq bool  // within a chunk (left bytes, then CRLF)
}

// Read reads decoded body bytes from br into p. It returns io.EOF once the
// last chunk and its trailer section are read, an Error for a body framed
// otherwise than RFC 9112 §7.1 says, io.ErrUnexpectedEOF for one cut short,
// and br's error otherwise. After an error the body's end is unknown, and
// br must not be read as the start of another message.
func (r *Reader) Read(br *bufio.Reader, p []byte) (int, error) {
	if !r.inSeq {
		size, err := readChunkSize(br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := readTrailers(br, r.RefuseTrailer); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		r.left, r.inSeq = size, true
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := br.Read(p)
	r.left -= int64(n)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, err
	}
	if r.left == 0 {
		if err := readCRLF(br); err != nil {
			return n, err
		}
		r.inSeq = false
	}
	return n, nil
}

// readLine reads one framing line ending in CRLF, at most limit bytes
// with its CRLF, and returns it without the CRLF; it is valid until br's
// next read. A longer line is refused once limit bytes are buffered without
// an LF: no more than limit bytes of it are looked at, and none consumed.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	n := 0
	for {
		_, err := br.Peek(n) // reads until n bytes are buffered, or fails
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.IndexByte(buf[:min(len(buf), limit)], '\n'); i >= 0 {
			br.Discard(i + 1) // buffered: buf stays valid
			return checkLine(buf[:i+1])
		}
		switch {
		case len(buf) >= limit || err == bufio.ErrBufferFull:
			return nil, Error("line too long")
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		n = len(buf) + 1
	}
}

// checkLine strips a line's CRLF, refusing a bare LF or CR.
func checkLine(line []byte) ([]byte, error) {
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, Error("bare LF")
	}
	line = line[:len(line)-2]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, Error("bare CR")
	}
	return line, nil
}

func readChunkSize(br *bufio.Reader) (int64, error) {
	line, err := readLine(br, MaxLine)
	if err != nil {
		return 0, err
	}
	var size int64
	i := 0
	for ; i < len(line); i++ {
		d := unhex(line[i])
		if d < 0 {
			break
		}
		if i == 15 { // 16 hex digits could overflow int64
			return 0, Error("chunk size too large")
		}
		size = size<<4 | int64(d)
	}
	if i == 0 {
		return 0, Error("no chunk size")
	}
	if i < len(line) {
		if line[i] != ';' {
			return 0, Error("bytes after the chunk size")
		}
		for _, c := range line[i+1:] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return 0, Error("control byte in a chunk extension")
			}
		}
	}
	return size, nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func readCRLF(br *bufio.Reader) error {
	b, err := br.Peek(2)
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return Error("chunk data not followed by CRLF")
	}
	br.Discard(2)
	return nil
}

// readTrailers reads the trailer section after the last chunk, through its
// empty line, and drops it. refuse (nil: none) names the fields refused.
func readTrailers(br *bufio.Reader, refuse func([]byte) bool) error {
	total := 0
	for n := 0; ; n++ {
		line, err := readLine(br, MaxTrailerBytes)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		total += len(line) + 2
		switch {
		case n == MaxTrailers || total > MaxTrailerBytes:
			return Error("trailer section too large")
		case line[0] == ' ' || line[0] == '\t':
			return Error("obs-fold in a trailer")
		}
		colon := -1
		for i, c := range line {
			if c == ':' {
				colon = i
				break
			}
			if !ascii.IsTokenByte(c) {
				return Error("bad trailer field name")
			}
		}
		if colon <= 0 {
			return Error("trailer line without a field name")
		}
		for _, c := range line[colon+1:] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return Error("control byte in a trailer value")
			}
		}
		if refuse != nil && refuse(line[:colon]) {
			return Error("trailer field not allowed")
		}
	}
}
