// Package framing holds the rules a request must meet before levee routes
// or forwards it: every request reaches a backend in exactly one
// unambiguous form (one Content-Length or chunked, token field names, one
// authority that both routes and forwards it), or is refused. The rules and
// their RFC sections are in docs/http.md; Fast checks an HTTP/1.x request
// as fasthttp read it, HTTP an HTTP/2 request as net/http read it.
//
// A refusal is one of the replies below, from levee's one reply table
// (package reply). None carries Connection: close, which on HTTP/2 would
// tear down every stream of the connection; on HTTP/1.x the caller closes
// the connection after any of them, since a request levee will not read as
// one message says nothing reliable about where the next one starts.
package framing

import (
	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/reply"
)

// Reasons of the framing refusals (Levee-Error values), named in the
// reply table with their answers.
const (
	BadRequest     = reply.BadRequest
	HeadersTooLong = reply.HeadersTooLong
	BadHeader      = reply.BadHeader
	BadFraming     = reply.BadFraming
	BadTarget      = reply.BadTarget
	BadHost        = reply.BadHost
	Connect        = reply.Connect
	Version        = reply.Version
	Expectation    = reply.Expectation
)

// The replies, one per reason.
var (
	BadRequestReply     = reply.For(BadRequest)
	HeadersTooLongReply = reply.For(HeadersTooLong)
	BadHeaderReply      = reply.For(BadHeader)
	BadFramingReply     = reply.For(BadFraming)
	BadTargetReply      = reply.For(BadTarget)
	BadHostReply        = reply.For(BadHost)
	ConnectReply        = reply.For(Connect)
	VersionReply        = reply.For(Version)
	ExpectationReply    = reply.For(Expectation)
)

// hostByte marks the bytes of uri-host [ ":" port ] (RFC 3986 §3.2.2:
// unreserved, sub-delims, and the brackets and colons of an IP literal and
// a port). No space, no '@' (userinfo), no '/', '?' or '#', and no '%':
// fasthttp's client decodes a percent-encoded host before it writes Host,
// so the backend would see another name than the one that was routed.
var hostByte = byteSet("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]")

// tokenByte marks tchar (RFC 9110 §5.6.2).
var tokenByte = byteSet("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~")

func byteSet(chars string) (t [256]bool) {
	for i := range len(chars) {
		t[chars[i]] = true
	}
	return t
}

// validHost reports whether h is a non-empty host[:port] (RFC 9110 §7.2,
// RFC 3986 §3.2.2): a name or IPv4 address, or an IP literal in brackets,
// then at most a port of digits. Of hostByte's bytes alone, "a.test:x",
// "a:b:c" or "]" would pass, and fasthttp's URI, which cannot parse them,
// gives such a request the path "/" whatever its target: it would route
// on "/" (the catalog strips what follows the colon), past the limits of
// the path it asks for, and reach the backend with its own.
func validHost[T string | []byte](h T) bool {
	if !onlyOf(&hostByte, h) {
		return false
	}
	i := 0
	if h[0] == '[' {
		for i = 1; i < len(h) && h[i] != ']'; i++ {
			if c := h[i]; c != ':' && c != '.' && !isHex(c) {
				return false // IPv6 only (no IPvFuture, no zone)
			}
		}
		if i == len(h) || i == 1 {
			return false
		}
		i++ // past ']'
	} else {
		for ; i < len(h) && h[i] != ':'; i++ {
			if h[i] == '[' || h[i] == ']' {
				return false
			}
		}
		if i == 0 {
			return false // a port without a host
		}
	}
	if i == len(h) {
		return true
	}
	if h[i] != ':' {
		return false
	}
	for i++; i < len(h); i++ {
		if h[i] < '0' || h[i] > '9' {
			return false
		}
	}
	return true
}

func token[T string | []byte](s T) bool { return onlyOf(&tokenByte, s) }

// The rules below, exported for a parser that reads a request head before
// fasthttp does (internal/h1loop) and must never pass what Fast refuses:
// one implementation of each rule, for both.

// ValidHost reports whether h is a Host value Fast accepts: a non-empty
// host[:port] of hostByte's bytes.
func ValidHost(h []byte) bool { return validHost(h) }

// TokenByte reports whether c is a tchar (RFC 9110 §5.6.2), a byte of a
// method or a field name.
func TokenByte(c byte) bool { return tokenByte[c] }

// NamelessCookie reports whether a Cookie field value holds a pair with an
// empty name ("=v"). levee refuses it (BadHeaderReply): the backend's head
// is written by fasthttp, which writes that pair as "v", and parsers read
// "v" as a cookie named v where "=v" is no cookie at all (Go's), so the
// backend would read a cookie the client never sent.
func NamelessCookie[T string | []byte](v T) bool {
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] != ';' {
			i++
		}
		pair := v[:i]
		for len(pair) > 0 && (pair[0] == ' ' || pair[0] == '\t') {
			pair = pair[1:]
		}
		if len(pair) > 0 && pair[0] == '=' {
			return true
		}
		if i == len(v) {
			break
		}
		v = v[i+1:]
	}
	return false
}

// Twin reports whether name is s (a field name in lower case, with
// hyphens) spelled with an underscore for some hyphen, any case:
// Twin("Content_Length", "content-length") is true, and Fast refuses such
// a twin of a framing field.
func Twin(name []byte, s string) bool { return twin(name, s) }

// onlyOf reports whether s is non-empty and all its bytes are in set.
func onlyOf[T string | []byte](set *[256]bool, s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := range len(s) {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

// twin reports whether name is s (lower case, with hyphens) written with
// an underscore for some hyphen: "Transfer_Encoding". CGI, WSGI and PHP
// backends read both spellings as one variable, and some servers frame on
// it, so a twin of a framing field is a second, hidden framing.
func twin(name []byte, s string) bool {
	if len(name) != len(s) {
		return false
	}
	under := false
	for i := range len(name) {
		c := ascii.Lower(name[i])
		if c == '_' && s[i] == '-' {
			under = true
			continue
		}
		if c != s[i] {
			return false
		}
	}
	return under
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
