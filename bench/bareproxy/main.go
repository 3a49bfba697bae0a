// Command bareproxy is the floor levee's HTTP/1.1 path is measured against:
// a fasthttp server that forwards every request to one backend through a
// fasthttp.HostClient, with none of levee's steps
// (no routing, limits, forwarding headers or metrics), on GOMAXPROCS=1 as
// levee runs in the bench. bench/proxy.sh runs
// it beside levee, so the difference between the two rows is levee's own
// work, and what the two share is fasthttp's, the Go runtime's and the
// kernel's.
//
// With -refuse it forwards nothing: it answers every request as levee
// refuses one over its rate (429), with levee's server settings (its
// timeouts and read buffer), the floor of a refusal on fasthttp in
// bench/refusal.sh.
package main

import (
	"flag"
	"log"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18084", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:9101", "the one backend")
	refuse := flag.Bool("refuse", false, "answer every request 429, as levee refuses one over its rate")
	flag.Parse()
	client := &fasthttp.HostClient{Addr: *backend, MaxConns: 256,
		DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}
	srv := &fasthttp.Server{
		// fasthttp's own proxy idiom: the request and response objects are
		// the client's; the body is read whole (100 bytes in the bench).
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.Header.Del("Connection")
			if err := client.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error("bad gateway", fasthttp.StatusBadGateway)
			}
		},
		DisableHeaderNamesNormalizing: true, NoDefaultServerHeader: true, NoDefaultContentType: true,
	}
	if *refuse {
		srv.Handler = refusal
		// levee's defaults (internal/server/fast.go): the header timeout, the
		// write and idle timeouts, a read buffer of max_header_bytes.
		srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = 10*time.Second, 5*time.Minute, 2*time.Minute
		srv.ReadBufferSize = 64 << 10
	}
	log.Fatal(srv.ListenAndServe(*listen))
}

var rejected = []byte("levee: rejected: rate\n")

// refusal answers as levee does a request over its rate, but for the
// RateLimit fields.
func refusal(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	h := &ctx.Response.Header
	h.SetContentType("text/plain; charset=utf-8")
	h.Set("Levee-Reject", "rate")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Retry-After", "1")
	ctx.SetBody(rejected)
}
