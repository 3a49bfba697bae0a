package forward

import (
	"bufio"
	"bytes"

	"github.com/leveeproxy/levee/internal/ascii"
)

// maxResponseFields bounds the fields of a backend's response head, as
// limits.header_count's default bounds a request's; its size is bounded by
// the read buffer it must fit in (the HostClient's, 4 KiB, as nginx's
// proxy_buffer_size).
const maxResponseFields = 100

// BadHeadError is a backend's response head that levee refuses to read:
// it is framed or spelled so that two readers could disagree on where a
// field, or the head, ends. The request gets a 502 and the connection is
// closed (docs/http.md, "What a backend may send").
type BadHeadError struct{ Why string }

func (e *BadHeadError) Error() string { return "forward: backend's response head: " + e.Why }

var (
	errHeadBareLF     = &BadHeadError{"a line ends in a bare LF"}
	errHeadBareCR     = &BadHeadError{"a bare CR"}
	errHeadFold       = &BadHeadError{"obs-fold (a line starting with white space)"}
	errHeadName       = &BadHeadError{"a field name that is not a token (white space or a control byte in or after it)"}
	errHeadNoColon    = &BadHeadError{"a field line without a colon"}
	errHeadValue      = &BadHeadError{"a control byte (NUL, CR, LF or another) in a field value"}
	errHeadStatus     = &BadHeadError{"a status line other than HTTP/1.x, a status of 100 to 599 and a reason without control bytes"}
	errHeadFields     = &BadHeadError{"more than 100 fields"}
	errHeadTooLarge   = &BadHeadError{"larger than the read buffer"}
	errHeadTwoLengths = &BadHeadError{"Content-Length twice"}
	errHeadLengthTE   = &BadHeadError{"both Content-Length and Transfer-Encoding"}
)

// checkHead reads, without consuming, the next response head from br and
// refuses it (*BadHeadError) unless every line ends in CRLF, no field is
// folded, every field name is a token followed at once by its colon, no
// value has a control byte but HTAB, there are at most maxResponseFields
// fields, and the framing fields cannot be read two ways. fasthttp, which
// parses the head next, is lenient on each of these (a bare LF ends a
// line, so a value holding one splits into an injected field). A read
// error is left for fasthttp to report as it does (io.EOF, a timeout).
func checkHead(br *bufio.Reader) error {
	n := 1
	for {
		if _, err := br.Peek(n); err != nil {
			if err == bufio.ErrBufferFull {
				return errHeadTooLarge
			}
			return nil
		}
		b, _ := br.Peek(br.Buffered())
		end, err := scanHead(b)
		if end > 0 || err != nil {
			return err
		}
		if len(b) >= br.Size() {
			return errHeadTooLarge
		}
		n = len(b) + 1
	}
}

// scanHead checks the head at the start of b: the length of the head
// through its empty line, or 0 if b does not hold all of it yet.
func scanHead(b []byte) (int, error) {
	var fields int
	var length, te bool
	for off, first := 0, true; ; first = false {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			// An incomplete line may already be refused: a CR not before
			// the end, which no later byte can make a CRLF.
			if j := bytes.IndexByte(b[off:], '\r'); j >= 0 && off+j+1 < len(b) {
				return 0, errHeadBareCR
			}
			return 0, nil
		}
		if i == 0 || b[off+i-1] != '\r' {
			return 0, errHeadBareLF
		}
		line := b[off : off+i-1]
		off += i + 1
		if bytes.IndexByte(line, '\r') >= 0 {
			return 0, errHeadBareCR
		}
		switch {
		case first:
			if !statusLine(line) {
				return 0, errHeadStatus
			}
			continue
		case len(line) == 0:
			if length && te {
				return 0, errHeadLengthTE
			}
			return off, nil
		case line[0] == ' ' || line[0] == '\t':
			return 0, errHeadFold
		}
		if fields++; fields > maxResponseFields {
			return 0, errHeadFields
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return 0, errHeadNoColon
		}
		name, value := line[:colon], line[colon+1:]
		if colon == 0 || !isToken(name) {
			return 0, errHeadName
		}
		if hasCTL(value) {
			return 0, errHeadValue
		}
		switch {
		case ascii.EqualFold(name, "Content-Length"):
			if length {
				return 0, errHeadTwoLengths // even equal: fasthttp refuses it too
			}
			length = true
		case ascii.EqualFold(name, "Transfer-Encoding"):
			te = true
		}
	}
}

// statusLine reports whether line is HTTP/1.0 or 1.1, a status of 100 to
// 599 and an optional reason without control bytes (RFC 9112 §4; fasthttp
// reads a status of 000 as 200, and takes any version).
func statusLine(line []byte) bool {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[7] != '0' && line[7] != '1' || line[8] != ' ' {
		return false
	}
	for i, c := range line[9:12] {
		if c < '0' || c > '9' || i == 0 && (c < '1' || c > '5') {
			return false
		}
	}
	return len(line) == 12 || line[12] == ' ' && !hasCTL(line[13:])
}

// hasCTL reports a control byte other than HTAB (RFC 9110 §5.5: a field
// value has none; CR, LF and NUL MUST be refused or replaced).
func hasCTL(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

func isToken(b []byte) bool {
	for _, c := range b {
		if !ascii.IsTokenByte(c) {
			return false
		}
	}
	return true
}
