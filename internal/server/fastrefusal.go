package server

import (
	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
)

// refuseFast answers ref on a fasthttp response, RateLimit fields
// included, as limits.Refusal.HTTP does on net/http. It lives with the
// engine adapter so that the gate links no fasthttp.
func refuseFast(ctx *fasthttp.RequestCtx, ref *limits.Refusal) {
	fastreply.Write(ctx, ref.Answer(), ref.RetryAfter)
	if ref.Rate != nil {
		fastreply.RateLimit(&ctx.Response.Header, ref.Rate.Policy, ref.Decision)
	}
}
