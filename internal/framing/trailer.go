package framing

import "github.com/leveeproxy/levee/internal/ascii"

// refusedTrailers are the fields a request's trailer section may not
// carry: framing, routing, authentication and forwarding fields, which a
// recipient that merges trailers into the header (RFC 9110 §6.5.2 lets it
// for fields defined as such) would read as the request's own. levee drops
// trailers, but a body carrying one is malformed, as fasthttp, which
// decoded chunked request bodies before levee did, held it (its
// isBadTrailer).
var refusedTrailers = []string{
	"authorization", "connection", "content-encoding", "content-length", "content-range", "content-type",
	"cookie", "expect", "host", "keep-alive", "location", "max-forwards", "proxy-authenticate",
	"proxy-authorization", "proxy-connection", "range", "set-cookie", "te", "trailer",
	"transfer-encoding", "www-authenticate",
}

// RefusedTrailer reports whether a request's chunked body may not carry a
// trailer field of this name (any case): one of refusedTrailers, or one
// starting X-Forwarded or X-Real-IP.
func RefusedTrailer(name []byte) bool {
	if hasPrefixFold(name, "x-forwarded") || hasPrefixFold(name, "x-real-ip") {
		return true
	}
	for _, f := range refusedTrailers {
		if ascii.EqualFold(name, f) {
			return true
		}
	}
	return false
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && ascii.EqualFold(b[:len(prefix)], prefix)
}
