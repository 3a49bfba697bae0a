// Command bareproxy is the floor levee's HTTP/1.1 path is measured against:
// a fasthttp server that forwards every request to one backend through a
// fasthttp.HostClient, with none of levee's steps
// (no routing, limits, forwarding headers or metrics), on GOMAXPROCS=1 as
// levee runs in the bench. bench/proxy.sh runs
// it beside levee, so the difference between the two rows is levee's own
// work, and what the two share is fasthttp's, the Go runtime's and the
// kernel's.
package main

import (
	"flag"
	"log"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18084", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:9101", "the one backend")
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
	log.Fatal(srv.ListenAndServe(*listen))
}
