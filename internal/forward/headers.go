package forward

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trust decides whose forwarding headers levee believes.
type Trust struct {
	prefixes []netip.Prefix
}

// NewTrust trusts peers in prefixes; with none, every incoming forwarding
// header is replaced.
func NewTrust(prefixes []netip.Prefix) Trust { return Trust{prefixes: prefixes} }

func (t Trust) trusted(ip netip.Addr) bool {
	for _, p := range t.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
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

// stdHeader reads a net/http request's headers.
type stdHeader http.Header

func (h stdHeader) all(name string) string   { return strings.Join(http.Header(h).Values(name), ", ") }
func (h stdHeader) first(name string) string { return http.Header(h).Get(name) }

// setForwarded writes the forwarding headers of in on out (net/http engine).
func (t Trust) setForwarded(in *http.Request, out http.Header) {
	f := t.forwarded(peerIP(in.RemoteAddr), in.Host, in.TLS != nil, stdHeader(in.Header))
	out["X-Forwarded-For"] = []string{f.xff}
	out["X-Forwarded-Host"] = []string{f.host}
	out["X-Forwarded-Proto"] = []string{f.proto}
	out["Forwarded"] = []string{f.fwd}
}

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

// dropH2CUpgrade removes a client's request to upgrade to cleartext HTTP/2
// (ReverseProxy passes it on; golang/go#80416). A backend that accepted would
// turn the connection into an opaque tunnel carrying any number of requests
// past levee's routing, limits and forwarding headers. The request is then
// forwarded as an ordinary one; WebSocket and other upgrades are untouched.
func dropH2CUpgrade(h http.Header) {
	for _, v := range h["Upgrade"] {
		for proto := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(proto), "/")
			if strings.EqualFold(name, "h2c") {
				delete(h, "Upgrade")
				delete(h, "Connection") // ReverseProxy reduced it to "Upgrade"
				delete(h, "Http2-Settings")
				return
			}
		}
	}
}

func quoteIfNeeded(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
		}
	}
	return s
}
