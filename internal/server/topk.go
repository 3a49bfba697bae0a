package server

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/forward"
)

// The heavy-hitter step (limits.client.top_k) counts every routed request
// once it has been answered, by the client key limits.client.key yields;
// when the key is a header the request lacks, by the peer's address, so
// that the top clients always name someone. The keys below are views into
// the request, valid until the handler returns: observe.TopK copies a key
// only when it takes a slot, so a client already tracked costs nothing.

// topHTTP is the client key of a net/http request for the top clients.
func topHTTP(k forward.KeySource, r *http.Request) string {
	if k.IsHeader() {
		if v := k.HTTP(r); v != "" {
			return v
		}
	}
	return forward.PeerIP(r)
}

// topFast is topHTTP for the fasthttp engine; an address is written into
// buf, so the result is valid while buf is.
func topFast(k forward.KeySource, ctx *fasthttp.RequestCtx, buf *[net.IPv6len * 4]byte) string {
	if k.IsHeader() {
		if v := ctx.Request.Header.Peek(k.Name()); len(v) > 0 {
			return b2s(v) // a view: the sketch copies a key only when it keeps it
		}
	}
	ip, ok := netip.AddrFromSlice(ctx.RemoteIP())
	if !ok {
		return ""
	}
	return b2s(ip.Unmap().AppendTo(buf[:0]))
}

// rejectedHTTP reports whether levee refused the request (it then carries
// Levee-Reject, whichever step refused it).
func rejectedHTTP(rec *recorder) bool {
	return len(rec.Header()[forward.HeaderReject]) > 0
}

// rejectedFast is rejectedHTTP for the fasthttp engine.
func rejectedFast(ctx *fasthttp.RequestCtx) bool {
	return len(ctx.Response.Header.Peek(forward.HeaderReject)) > 0
}
