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

// setForwarded writes X-Forwarded-For/-Host/-Proto and Forwarded on out.
// From a trusted peer the incoming values are kept and extended; from
// anyone else they are replaced, so a client cannot forge its address.
func (t Trust) setForwarded(in *http.Request, out http.Header) {
	peer := peerIP(in.RemoteAddr)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	host := in.Host
	xff, fwd := peer.String(), forwardedElement(peer, host, proto)
	if peer.IsValid() && t.trusted(peer) {
		if prior := strings.Join(in.Header.Values("X-Forwarded-For"), ", "); prior != "" {
			xff = prior + ", " + xff
		}
		if v := in.Header.Get("X-Forwarded-Host"); v != "" {
			host = v
		}
		if v := in.Header.Get("X-Forwarded-Proto"); v != "" {
			proto = v
		}
		if prior := strings.Join(in.Header.Values("Forwarded"), ", "); prior != "" {
			fwd = prior + ", " + fwd
		}
	}
	out["X-Forwarded-For"] = []string{xff}
	out["X-Forwarded-Host"] = []string{host}
	out["X-Forwarded-Proto"] = []string{proto}
	out["Forwarded"] = []string{fwd}
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
