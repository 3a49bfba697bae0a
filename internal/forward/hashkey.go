package forward

import (
	"net"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
)

// hashKey extracts a request's key for the hash policy; the zero value
// extracts nothing ("").
type hashKey struct {
	kind string // "header", "cookie", "ip" or ""
	name string
}

func newHashKey(src string) hashKey {
	kind, name, err := config.ParseHashKey(src)
	if err != nil {
		return hashKey{}
	}
	return hashKey{kind: kind, name: name}
}

func (k hashKey) http(r *http.Request) string {
	switch k.kind {
	case "header":
		return r.Header.Get(k.name)
	case "cookie":
		if c, err := r.Cookie(k.name); err == nil {
			return c.Value
		}
	case "ip":
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host
		}
		return r.RemoteAddr
	}
	return ""
}

func (k hashKey) fast(ctx *fasthttp.RequestCtx) string {
	switch k.kind {
	case "header":
		for name, v := range ctx.Request.Header.All() {
			if equalFold(name, k.name) {
				return string(v)
			}
		}
	case "cookie":
		return string(ctx.Request.Header.Cookie(k.name))
	case "ip":
		return ctx.RemoteIP().String()
	}
	return ""
}
