package forward

import (
	"iter"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/netlimit"
)

// FastKey returns k's key of a fasthttp request as an ordinary string (it
// copies: callers such as the limiter keep it beyond the request).
func FastKey(k clientkey.Source, ctx *fasthttp.RequestCtx) string {
	if k.Kind() == clientkey.IP {
		if ip := netlimit.PeerIPOf(ctx.Conn()); ip != "" {
			return ip
		}
		return ctx.RemoteIP().String()
	}
	return string(FastKeyView(k, ctx))
}

// FastKeyView is k's header or cookie key of a fasthttp request as a view
// into it (nil for ip, or when absent): a header's as HeaderKeyView reads
// it from the fields as sent.
func FastKeyView(k clientkey.Source, ctx *fasthttp.RequestCtx) []byte {
	switch k.Kind() {
	case clientkey.Header:
		return HeaderKeyView(k, ctx.Request.Header.AllInOrder())
	case clientkey.Cookie:
		return ctx.Request.Header.Cookie(k.Name())
	}
	return nil
}

// HeaderKeyView is k's header key among a request's fields as sent, from
// any engine: the first field of its name, matched in any case as
// net/http's canonical map does (fasthttp passes names through as sent).
// nil when absent.
func HeaderKeyView(k clientkey.Source, fields iter.Seq2[[]byte, []byte]) []byte {
	for name, v := range fields {
		if ascii.EqualFold(name, k.Name()) {
			return v
		}
	}
	return nil
}
