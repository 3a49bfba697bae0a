package framing

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/reply"
)

// Fast checks an HTTP/1.x request as fasthttp's server read it (header
// names as sent) and returns the refusal, or nil when the request has one
// unambiguous form. An absolute-form target is rewritten to origin form
// with its authority as Host (RFC 9112 §3.2.2: the target's authority wins
// over Host), so the authority that routes the request is the one the
// backend sees. It allocates nothing, but for an absolute-form target with
// a query and no path.
//
// What fasthttp refuses itself (fastParseError answers it) is not checked
// again: a duplicate or non-numeric Content-Length, a Transfer-Encoding
// other than one chunked or identity, Transfer-Encoding on HTTP/1.0, a
// duplicate Host, a missing Host on HTTP/1.1, whitespace before a colon or
// at the start of the first field, control bytes (NUL, bare CR, DEL) in a
// name, value or target, a method that is not a token, a malformed version.
func Fast(req *fasthttp.Request) *reply.Reply {
	h := &req.Header
	// fasthttp takes any HTTP/d.d; it would read HTTP/2.0 or HTTP/1.2 by
	// HTTP/1.0's rules, which is neither (RFC 9110 §2.5 asks 1.x, x > 1, to
	// be read as 1.1; no such client exists, so levee refuses it too).
	if p := h.Protocol(); string(p) != "HTTP/1.1" && string(p) != "HTTP/1.0" {
		return VersionReply
	}
	if string(h.Method()) == fasthttp.MethodConnect {
		return ConnectReply
	}
	if r := fields(h); r != nil {
		return r
	}
	if r := target(req); r != nil {
		return r
	}
	if !validHost(h.Host()) { // HTTP/1.0 too: without an authority nothing routes
		return BadHostReply
	}
	return nil
}

// fields checks the header section as it came off the wire: every line
// ends in CRLF, none is folded, names hold no space, the body is framed
// once, and Expect asks for nothing but 100-continue.
func fields(h *fasthttp.RequestHeader) *reply.Reply {
	var te, cl bool
	raw := h.RawHeaders() // the exact block, up to and including its empty line
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			break
		}
		line := raw[:i]
		raw = raw[i+1:]
		// A bare LF ends a line for fasthttp (RFC 9112 §2.2 allows it) but
		// not for every parser in front of levee, which would see one field
		// where levee sees two.
		if i == 0 || line[i-1] != '\r' {
			return BadHeaderReply
		}
		line = line[:i-1]
		if len(line) == 0 {
			break
		}
		// obs-fold (RFC 9112 §5.2): refused, not joined, as a folded
		// Transfer-Encoding or Host reads differently on the next hop.
		if line[0] == ' ' || line[0] == '\t' {
			return BadHeaderReply
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return BadHeaderReply
		}
		name := line[:colon]
		// fasthttp admits a space inside a name ("Transfer Encoding") and
		// passes the field on; a name is a token (RFC 9110 §5.1).
		if bytes.IndexByte(name, ' ') >= 0 {
			return BadHeaderReply
		}
		switch len(name) {
		case len("content-length"):
			if ascii.EqualFold(name, "content-length") {
				cl = true
			} else if twin(name, "content-length") {
				return BadFramingReply
			}
		case len("transfer-encoding"):
			if ascii.EqualFold(name, "transfer-encoding") {
				te = true
			} else if twin(name, "transfer-encoding") {
				return BadFramingReply
			}
		case len("expect"): // and len("cookie")
			// RFC 9110 §10.1.1: a server MAY answer 417 to any other
			// expectation; levee does, rather than forward one it cannot meet.
			if v := bytes.Trim(line[colon+1:], " \t"); ascii.EqualFold(name, "expect") && len(v) > 0 && !ascii.EqualFold(v, "100-continue") {
				return ExpectationReply
			}
			if ascii.EqualFold(name, "cookie") && NamelessCookie(line[colon+1:]) {
				return BadHeaderReply
			}
		}
	}
	// fasthttp frames Content-Length with Transfer-Encoding as chunked, and
	// "Transfer-Encoding: identity" as no body at all; RFC 9112 §6.1 and
	// §6.3 make both a 400 and a close.
	if te && (cl || h.ContentLength() != -1) {
		return BadFramingReply
	}
	return nil
}

// target checks the request-target (RFC 9112 §3.2) and turns absolute-form
// into origin form. fasthttp admits origin-form, "*" for OPTIONS and
// absolute-form; authority-form is CONNECT's, refused before.
func target(req *fasthttp.Request) *reply.Reply {
	h := &req.Header
	uri := h.RequestURI()
	// A fragment is never part of a request-target; parsers disagree on
	// whether it ends the path.
	if bytes.IndexByte(uri, '#') >= 0 {
		return BadTargetReply
	}
	if len(uri) > 1 && uri[0] == '/' && uri[1] == '/' && bytes.Contains(uri, []byte("://")) {
		// Origin-form, but fasthttp's URI parser (and so its client, which
		// writes Host from it) reads "//a://b" as authority "a:" and path "//b".
		return BadTargetReply
	}
	if (len(uri) > 0 && uri[0] == '/') || string(uri) == "*" {
		return nil
	}
	scheme, rest, ok := bytes.Cut(uri, []byte("://"))
	if !ok || !ascii.EqualFold(scheme, "http") && !ascii.EqualFold(scheme, "https") {
		return BadTargetReply
	}
	end := len(rest)
	if i := bytes.IndexAny(rest, "/?"); i >= 0 {
		end = i
	}
	authority, path := rest[:end], rest[end:]
	if !validHost(authority) { // empty, or with userinfo (RFC 9110 §4.2.4)
		return BadHostReply
	}
	h.SetHostBytes(authority) // copies: authority points into the target
	switch {
	case len(path) == 0 && string(h.Method()) == fasthttp.MethodOptions:
		req.SetRequestURI("*") // RFC 9112 §3.2.4
	case len(path) == 0:
		req.SetRequestURI("/")
	case path[0] == '?':
		req.SetRequestURIBytes(append([]byte{'/'}, path...)) // rare enough to allocate
	default:
		req.SetRequestURIBytes(path)
	}
	return nil
}
