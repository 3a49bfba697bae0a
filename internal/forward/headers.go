package forward

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/netlimit"

	"github.com/valyala/fasthttp"
)

// Trust decides whose forwarding headers levee believes.
type Trust struct {
	prefixes []netip.Prefix
}

// NewTrust trusts peers in prefixes; with none, every incoming forwarding
// header is replaced.
func NewTrust(prefixes []netip.Prefix) Trust { return Trust{prefixes: prefixes} }

// Trusted reports whether ip is in server.trusted_proxies.
func (t Trust) Trusted(ip netip.Addr) bool { return t.trusted(ip) }

func (t Trust) trusted(ip netip.Addr) bool {
	for _, p := range t.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// identityHeaders are headers a backend may take for the client's identity
// that levee does not set: X-Real-IP, and the underscore twins of the
// forwarding headers, which CGI, WSGI and PHP read as the hyphenated ones
// (X_Forwarded_For and X-Forwarded-For are both HTTP_X_FORWARDED_FOR). Only a
// trusted peer's pass; from anyone else they would be forged. Matched in any
// case.
var identityHeaders = [...]string{"X-Real-IP", "X_Real_IP", "X_Forwarded_For", "X_Forwarded_Host", "X_Forwarded_Proto"}

// isIdentity reports whether k is one of identityHeaders, without allocating.
func isIdentity[T string | []byte](k T) bool {
	if len(k) < len("X-Real-IP") || ascii.Lower(k[0]) != 'x' { // most names end here
		return false
	}
	for _, h := range identityHeaders {
		if ascii.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// trustsFast reports whether ctx's peer is trusted (fasthttp engine).
func (t Trust) trustsFast(ctx *fasthttp.RequestCtx) bool {
	peer := fastPeer(ctx)
	return peer.IsValid() && t.trusted(peer)
}

// fastPeer is the address of ctx's peer, invalid when it has none.
func fastPeer(ctx *fasthttp.RequestCtx) netip.Addr {
	if ip, ok := netlimit.PeerOf(ctx.Conn()); ok {
		return ip
	}
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	return ip.Unmap()
}

// forwarded are the values levee sets on a request it forwards.
type forwarded struct{ xff, host, proto, fwd string }

// priorHeaders reads the forwarding headers a client sent, whatever the
// engine: all joins every value of name with ", "; first is the first value.
type priorHeaders interface {
	all(name string) string
	first(name string) string
}

// forwarded computes X-Forwarded-For/-Host/-Proto and Forwarded for a
// request from peer for host. From a trusted peer the incoming values (read
// from in) are kept and extended; from anyone else they are replaced, so a
// client cannot forge its address. Both engines call it.
func (t Trust) forwarded(peer netip.Addr, host string, tls bool, in priorHeaders) forwarded {
	proto := "http"
	if tls {
		proto = "https"
	}
	f := forwarded{xff: peer.String(), host: host, proto: proto, fwd: forwardedElement(peer, host, proto)}
	if peer.IsValid() && t.trusted(peer) {
		if prior := in.all("X-Forwarded-For"); prior != "" {
			f.xff = prior + ", " + f.xff
		}
		if v := in.first("X-Forwarded-Host"); v != "" {
			f.host = v
		}
		if v := in.first("X-Forwarded-Proto"); v != "" {
			f.proto = v
		}
		if prior := in.all("Forwarded"); prior != "" {
			f.fwd = prior + ", " + f.fwd
		}
	}
	return f
}

// setForwardedFast writes the forwarding headers of ctx's request on out
// (fasthttp engine), which copyRequest left without any (so they are
// added, not searched for).
func (t Trust) setForwardedFast(ctx *fasthttp.RequestCtx, out *fasthttp.RequestHeader) {
	in := &ctx.Request.Header
	setForwarded(t, out, fastPeer(ctx), in.Host(), ctx.IsTLS(), fastHeader{in})
}

// setForwarded writes the forwarding headers of a request from peer for
// host on out, which has none yet: both engines' one way. From an
// untrusted peer, the common case, the values are appended into a stack
// buffer and copied by fasthttp: no allocation.
func setForwarded[T string | []byte](t Trust, out *fasthttp.RequestHeader, peer netip.Addr, host T, tls bool, in priorHeaders) {
	if (peer.IsValid() && t.trusted(peer)) || needsQuote(host) {
		f := t.forwarded(peer, string(host), tls, in)
		out.Set("X-Forwarded-For", f.xff)
		out.Set("X-Forwarded-Host", f.host)
		out.Set("X-Forwarded-Proto", f.proto)
		out.Set("Forwarded", f.fwd)
		return
	}
	proto := "http"
	if tls {
		proto = "https"
	}
	var buf [128]byte
	b := buf[:0]
	if peer.IsValid() {
		b = peer.AppendTo(b)
	} else {
		b = append(b, "invalid IP"...) // as netip.Addr{}.String() writes it
	}
	out.AddBytesV("X-Forwarded-For", b)
	n := len(b)
	b = append(b, host...)
	out.AddBytesV("X-Forwarded-Host", b[n:])
	out.Add("X-Forwarded-Proto", proto)
	b = append(b[:0], "for="...)
	switch {
	case !peer.IsValid():
		b = append(b, "unknown"...)
	case peer.Is6():
		b = append(b, `"[`...)
		b = peer.AppendTo(b)
		b = append(b, `]"`...)
	default:
		b = peer.AppendTo(b)
	}
	if len(host) > 0 {
		b = append(append(b, ";host="...), host...)
	}
	b = append(append(b, ";proto="...), proto...)
	out.AddBytesV("Forwarded", b)
}

// needsQuote reports whether a Forwarded host value must be quoted.
func needsQuote[T string | []byte](s T) bool {
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return true
		}
	}
	return false
}

// stdHeader reads a net/http request's headers.
type stdHeader http.Header

func (h stdHeader) all(name string) string   { return strings.Join(http.Header(h).Values(name), ", ") }
func (h stdHeader) first(name string) string { return http.Header(h).Get(name) }

func peerIP(remoteAddr string) netip.Addr {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, _ := netip.ParseAddr(host)
	return ip.Unmap()
}

// forwardedElement renders one RFC 7239 element, quoting where the grammar needs it.
func forwardedElement(peer netip.Addr, host, proto string) string {
	var b strings.Builder
	b.WriteString("for=")
	switch {
	case !peer.IsValid():
		b.WriteString("unknown")
	case peer.Is6():
		b.WriteString(`"[` + peer.String() + `]"`)
	default:
		b.WriteString(peer.String())
	}
	if host != "" {
		b.WriteString(";host=")
		b.WriteString(quoteIfNeeded(host))
	}
	b.WriteString(";proto=")
	b.WriteString(proto)
	return b.String()
}

func quoteIfNeeded(s string) string {
	if needsQuote(s) {
		return `"` + quoteReplacer.Replace(s) + `"`
	}
	return s
}

// quoteReplacer escapes a quoted-string (RFC 9110 §5.6.4); built once.
var quoteReplacer = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
