package forward

import (
	"errors"

	"github.com/valyala/fasthttp"
)

// errBadHead is a backend's response head that fasthttp read but levee
// will not pass on: a status outside 100–599 (RFC 9110 §15), a field name
// that is not a token ("Content Length", RFC 9110 §5.1), or a control byte
// but HTAB in a value (RFC 9110 §5.5). Passed on, a name with a space may
// be read as the framing field it resembles by a client or a proxy in
// front of levee (found by FuzzReadHead).
var errBadHead = errors.New("forward: backend's response head is malformed")

// checkHead reports errBadHead for a final response head levee would not
// pass on as read.
func checkHead(h *fasthttp.ResponseHeader) error {
	if code := h.StatusCode(); code < 100 || code > 599 {
		return errBadHead
	}
	for k, v := range h.All() {
		if len(k) == 0 {
			return errBadHead
		}
		for _, c := range k {
			if !tokenByte(c) {
				return errBadHead
			}
		}
		for _, c := range v {
			if c < ' ' && c != '\t' || c == 0x7f {
				return errBadHead
			}
		}
	}
	return nil
}

// tokenByte reports whether c is a tchar (RFC 9110 §5.6.2).
func tokenByte(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
