package h2

import (
	"net/http"
	"strconv"

	"golang.org/x/net/http2/hpack"
)

// The response encoder never indexes: each field is a literal without
// indexing (or an entry of the static table), so a stream encodes its
// header block on its own, outside the connection's write lock, and blocks
// may go out in any order (nginx encodes its responses the same way). The
// decoder's table stays empty; what is lost is only the compression of
// fields repeated across responses.

// staticName maps the canonical (net/http) form of a header name to its
// lowercase wire form and the index of its name in the static table (RFC
// 7541 Appendix A), 0 for none.
type wireName struct {
	lower string
	index uint8
}

var staticNames = map[string]wireName{}

func init() {
	names := []string{
		15: "accept-charset", 16: "accept-encoding", 17: "accept-language", 18: "accept-ranges",
		19: "accept", 20: "access-control-allow-origin", 21: "age", 22: "allow", 23: "authorization",
		24: "cache-control", 25: "content-disposition", 26: "content-encoding", 27: "content-language",
		28: "content-length", 29: "content-location", 30: "content-range", 31: "content-type",
		32: "cookie", 33: "date", 34: "etag", 35: "expect", 36: "expires", 37: "from", 38: "host",
		39: "if-match", 40: "if-modified-since", 41: "if-none-match", 42: "if-range",
		43: "if-unmodified-since", 44: "last-modified", 45: "link", 46: "location", 47: "max-forwards",
		48: "proxy-authenticate", 49: "proxy-authorization", 50: "range", 51: "referer", 52: "refresh",
		53: "retry-after", 54: "server", 55: "set-cookie", 56: "strict-transport-security",
		57: "transfer-encoding", 58: "user-agent", 59: "vary", 60: "via", 61: "www-authenticate",
	}
	for i, n := range names {
		if n != "" {
			staticNames[http.CanonicalHeaderKey(n)] = wireName{lower: n, index: uint8(i)}
		}
	}
	// Common names outside the static table: their lowercase form without
	// an allocation.
	for _, n := range []string{"x-content-type-options", "x-frame-options", "x-request-id", "x-xss-protection",
		"access-control-allow-credentials", "access-control-allow-headers", "access-control-allow-methods",
		"access-control-expose-headers", "access-control-max-age", "content-security-policy", "alt-svc",
		"trailer", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "traceparent", "tracestate",
		"grpc-status", "grpc-message", "keep-alive", "connection", "proxy-connection", "upgrade", "te"} {
		staticNames[http.CanonicalHeaderKey(n)] = wireName{lower: n}
	}
}

// statusIndex is the static table entry of a :status, 0 for none.
func statusIndex(code int) uint8 {
	switch code {
	case 200:
		return 8
	case 204:
		return 9
	case 206:
		return 10
	case 304:
		return 11
	case 400:
		return 12
	case 404:
		return 13
	case 500:
		return 14
	}
	return 0
}

// appendInt appends v with an n-bit prefix whose other bits are first
// (RFC 7541 §5.1).
func appendInt(b []byte, first byte, n uint, v uint64) []byte {
	k := uint64(1)<<n - 1
	if v < k {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(k))
	v -= k
	for v >= 128 {
		b = append(b, byte(v&0x7f|0x80))
		v >>= 7
	}
	return append(b, byte(v))
}

// appendString appends s as a string literal, Huffman-coded when that is
// shorter (§5.2).
func appendString(b []byte, s string) []byte {
	if h := hpack.HuffmanEncodeLength(s); h < uint64(len(s)) {
		b = appendInt(b, 0x80, 7, h)
		return hpack.AppendHuffmanString(b, s)
	}
	b = appendInt(b, 0, 7, uint64(len(s)))
	return append(b, s...)
}

// appendStatus appends the :status field.
func appendStatus(b []byte, code int) []byte {
	if i := statusIndex(code); i != 0 {
		return append(b, 0x80|i)
	}
	b = append(b, 0x08) // literal without indexing, name :status (8)
	var d [3]byte
	s := strconv.AppendInt(d[:0], int64(code), 10)
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// appendField appends the field of canonical (or any) name k with value v,
// as a literal never indexed when sensitive, else without indexing.
func appendField(b []byte, k, v string, sensitive bool) []byte {
	first := byte(0x00)
	if sensitive {
		first = 0x10
	}
	if w, ok := staticNames[k]; ok {
		if w.index != 0 {
			b = appendInt(b, first, 4, uint64(w.index))
			return appendString(b, v)
		}
		b = append(b, first)
		b = appendString(b, w.lower)
		return appendString(b, v)
	}
	b = append(b, first)
	b = appendLowerString(b, k)
	return appendString(b, v)
}

// appendLowerString appends k lowercased as a plain string literal.
func appendLowerString(b []byte, k string) []byte {
	b = appendInt(b, 0, 7, uint64(len(k)))
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// lowerName returns the wire form of the canonical name k when it is
// known without an allocation.
func lowerName(k string) (string, bool) {
	w, ok := staticNames[k]
	return w.lower, ok
}
