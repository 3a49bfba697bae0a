// Package fastreply writes package reply's answers on the fasthttp engine:
// the same status, headers and body as reply's net/http writers, without
// allocating. It is apart from reply so that the table links no fasthttp.
package fastreply

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

var (
	contentType = []byte(reply.ContentType)
	noSniff     = []byte(reply.NoSniff)
)

// Write writes r on a fasthttp response, replacing whatever it held, with
// retryAfter (0: the reply's own, if any) as Retry-After. It allocates
// nothing.
func Write(ctx *fasthttp.RequestCtx, r *reply.Reply, retryAfter time.Duration) {
	Fill(&ctx.Response, r, retryAfter)
}

// Fill is Write on a response of its own (the event loop's, which
// serializes it itself).
func Fill(resp *fasthttp.Response, r *reply.Reply, retryAfter time.Duration) {
	resp.Reset()
	resp.SetStatusCode(r.Status)
	h := &resp.Header
	h.SetContentTypeBytes(contentType)
	h.SetBytesV(r.Header, r.ReasonBytes())
	h.SetBytesV("X-Content-Type-Options", noSniff)
	if s := r.RetryAfterSeconds(retryAfter); s > 0 {
		var buf [20]byte
		h.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], s, 10))
	}
	if r.Close {
		h.SetConnectionClose()
	}
	resp.SetBodyRaw(r.BodyBytes())
}

// Violation answers a shape violation, as reply.ViolationHTTP does. It
// allocates nothing. closeConn: part of the body was read.
func Violation(ctx *fasthttp.RequestCtx, v *shape.Violation, closeConn bool) {
	FillViolation(&ctx.Response, v, closeConn)
}

// FillViolation is Violation on a response of its own.
func FillViolation(resp *fasthttp.Response, v *shape.Violation, closeConn bool) {
	resp.Reset()
	resp.SetStatusCode(v.Status)
	h := &resp.Header
	h.SetContentTypeBytes(contentType)
	h.Set(reply.Reject, string(v.Reason))
	h.SetBytesV("X-Content-Type-Options", noSniff)
	if closeConn {
		h.SetConnectionClose()
	}
	resp.AppendBodyString("levee: rejected: ")
	resp.AppendBodyString(v.Msg)
	resp.AppendBodyString("\n")
}

// RateLimit sets the IETF RateLimit fields of a rate refusal d by policy p,
// as the gate's Rule.HTTPHeaders does on net/http, allocating nothing.
func RateLimit(h *fasthttp.ResponseHeader, p ratelimit.Policy, d ratelimit.Decision) {
	h.Set("RateLimit-Policy", p.Header())
	var buf [64]byte
	h.SetBytesV("RateLimit", p.AppendRateLimit(buf[:0], d))
}
