package forward

import (
	"net"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/config"
)

// KeySource names who a request is for levee's per-client steps: the hash
// policy (balance.hash.key), client rate limits, fair share and priorities
// (limits.client.key). It reads header:NAME, cookie:NAME or the peer's IP
// ("ip"); the zero value reads nothing (""). One type serves every step so
// that they can never disagree about who a client is.
type KeySource struct {
	kind string // "header", "cookie", "ip" or ""
	name string
}

// NewKeySource parses a key source as the config writes it; one the config
// would reject gives the zero KeySource.
func NewKeySource(src string) KeySource {
	kind, name, err := config.ParseHashKey(src)
	if err != nil {
		return KeySource{}
	}
	return KeySource{kind: kind, name: name}
}

// IsHeader reports whether the key comes from a request header.
func (k KeySource) IsHeader() bool { return k.kind == "header" }

// HTTP returns the key of a net/http request ("" when the header or cookie
// is absent).
func (k KeySource) HTTP(r *http.Request) string {
	switch k.kind {
	case "header":
		return r.Header.Get(k.name)
	case "cookie":
		if c, err := r.Cookie(k.name); err == nil {
			return c.Value
		}
	case "ip":
		return PeerIP(r)
	}
	return ""
}

// Fast returns the key of a fasthttp request as an ordinary string (it
// copies: callers such as the limiter keep it beyond the request).
func (k KeySource) Fast(ctx *fasthttp.RequestCtx) string {
	if k.kind == "ip" {
		if ip := connPeerIP(ctx.Conn()); ip != "" {
			return ip
		}
		return ctx.RemoteIP().String()
	}
	return string(k.FastView(ctx))
}

// connPeerIP is the peer address a connection formatted once when it was
// accepted (levee's listener conns offer PeerIP; TLS and peeked conns wrap
// them), or "" when none does.
func connPeerIP(c net.Conn) string {
	for c != nil {
		if p, ok := c.(interface{ PeerIP() string }); ok {
			return p.PeerIP()
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ""
		}
		c = u.NetConn()
	}
	return ""
}

// FastView is the header or cookie key of a fasthttp request as a view into
// it (nil for ip, or when absent). Header names are matched in any case,
// as net/http's canonical map does: fasthttp passes names through as sent.
func (k KeySource) FastView(ctx *fasthttp.RequestCtx) []byte {
	switch k.kind {
	case "header":
		for name, v := range ctx.Request.Header.All() {
			if ascii.EqualFold(name, k.name) {
				return v
			}
		}
	case "cookie":
		return ctx.Request.Header.Cookie(k.name)
	}
	return nil
}

// PeerIP is the address of a net/http request's peer, without its port.
func PeerIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// Name is the header or cookie name ("" for ip).
func (k KeySource) Name() string { return k.name }
