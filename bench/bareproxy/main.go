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
// bench/refusal.sh. With -refuse -loop the same answer comes from levee's
// event loop (internal/h1loop) with its defaults, in the loop: the floor
// of a refusal on the loop, with none of levee's steps.
package main

import (
	"flag"
	"log"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/h1loop"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18084", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:9101", "the one backend")
	refuse := flag.Bool("refuse", false, "answer every request 429, as levee refuses one over its rate")
	loop := flag.Bool("loop", false, "with -refuse: answer from levee's event loop (internal/h1loop), not fasthttp")
	flag.Parse()
	if *refuse && *loop {
		log.Fatal(serveLoop(*listen))
	}
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

// loopRefusal is the answer of -refuse -loop: what refusal writes.
var loopRefusal = []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 22\r\nLevee-Reject: rate\r\nX-Content-Type-Options: nosniff\r\nRetry-After: 1\r\n\r\n" +
	"levee: rejected: rate\n")

// loopHandler answers every simple request with loopRefusal in the loop;
// a request that is not simple has its connection closed.
type loopHandler struct{}

func (loopHandler) Accepted(*h1loop.Conn) bool { return true }
func (loopHandler) Closed(*h1loop.Conn)        {}
func (loopHandler) Handoff(_ *h1loop.Conn, nc net.Conn, _ []byte) {
	nc.Close()
}
func (loopHandler) Request(c *h1loop.Conn, h *h1loop.Head) h1loop.Verdict {
	c.Answer(loopRefusal)
	if h.Close {
		return h1loop.Close
	}
	return h1loop.Answered
}

func serveLoop(listen string) error {
	addr, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		return err
	}
	ln, err := net.ListenTCP("tcp", addr)
	if err != nil {
		return err
	}
	s, err := h1loop.New(h1loop.Options{Handler: loopHandler{}})
	if err != nil {
		return err
	}
	return s.Serve(ln)
}
