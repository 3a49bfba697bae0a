package framing

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/leveeproxy/levee/internal/reply"
)

// HTTP checks an HTTP/2 request as net/http's server read it, before it is
// forwarded to a backend as HTTP/1.1, and returns the refusal, or nil.
//
// net/http refuses itself (a stream error, or its own 400, before levee's
// handler runs): connection-specific fields (Connection, Keep-Alive,
// Proxy-Connection, Transfer-Encoding, Upgrade), TE other than trailers,
// upper-case or non-token names, NUL, CR or LF in a value, missing,
// repeated or unknown pseudo-header fields, a :scheme other than http or
// https, userinfo in :authority, DATA beyond the declared content-length
// (RFC 9113 §8.1.1, §8.2, §8.3). It joins cookie fields with "; " (§8.2.3)
// and drops Expect: 100-continue after answering it.
func HTTP(r *http.Request) *reply.Reply {
	if r.Method == http.MethodConnect { // extended CONNECT (:protocol) too
		return ConnectReply
	}
	if !token(r.Method) { // HTTP/1.1's request line would not hold it
		return BadRequestReply
	}
	if !originTarget(r.RequestURI, r.Method) {
		return BadTargetReply
	}
	// :authority routes and forwards the request, so a Host field beside it
	// must name the same (RFC 9113 §8.3.1); without :authority net/http
	// takes Host's value.
	if !validHost(r.Host) {
		return BadHostReply
	}
	if hv, ok := r.Header["Host"]; ok && (len(hv) != 1 || !strings.EqualFold(hv[0], r.Host)) {
		return BadHostReply
	}
	// net/http reads the first content-length only, takes a malformed one
	// for 0, and ignores one on a stream without DATA: the body could then
	// be framed two ways (RFC 9113 §8.1.1, RFC 9110 §8.6).
	if cl, ok := r.Header["Content-Length"]; ok {
		if len(cl) != 1 || !digits(cl[0]) {
			return BadFramingReply
		}
		if n, err := strconv.ParseInt(cl[0], 10, 64); err != nil || n != r.ContentLength {
			return BadFramingReply
		}
	}
	for _, vv := range r.Header {
		for _, v := range vv {
			// RFC 9113 §8.2.1: a value neither starts nor ends with SP or HTAB.
			if n := len(v); n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t') {
				return BadHeaderReply
			}
		}
	}
	for _, v := range r.Header["Cookie"] {
		if NamelessCookie(v) {
			return BadHeaderReply
		}
	}
	if _, ok := r.Header["Expect"]; ok { // net/http removed a 100-continue
		return ExpectationReply
	}
	return nil
}

// originTarget reports whether :path is origin-form (an absolute path and
// query, RFC 9113 §8.3.1) or "*" for OPTIONS. Space, control bytes and a
// fragment are refused: HTTP/1.1 cannot carry the first two, and net/http
// would escape them, so the backend would see a target levee never got.
func originTarget(t, method string) bool {
	if t == "*" {
		return method == http.MethodOptions
	}
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	for i := range len(t) {
		if c := t[i]; c <= ' ' || c == 0x7f || c == '#' {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
