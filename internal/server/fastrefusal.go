package server

import (
	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
)

// fillRefusal writes ref on a fasthttp response, RateLimit fields
// included, as limits.Refusal.HTTP does on net/http: the request's own
// (fastExchange) or the event loop's, which serializes it itself. It
// lives with the engine adapters so that the gate links no fasthttp.
func fillRefusal(resp *fasthttp.Response, ref *limits.Refusal) {
	fastreply.Fill(resp, ref.Answer(), ref.RetryAfter)
	if ref.Rate != nil {
		fastreply.RateLimit(&resp.Header, ref.Rate.Policy, ref.Decision)
	}
}
