package forward

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
)

// httpLeg is the net/http engine's way to a backend: an http.RoundTripper
// over the backend's one connection pool and exchange, the fasthttp
// engine's. Both engines thus share one pool per backend (one
// max_conns_per_backend, one idle pool) and one rule for reusing a
// connection (exchange): no http.Transport, with its read loop that pools
// a connection and races the next request for late bytes, and Go's lenient
// parsing of backend heads, is on the request path.
//
// The request's context reaches the exchange through watch: a request
// that ends (its stream reset, its client gone) aborts the read or write
// it is in, and its connection is closed, never pooled. There is one per
// pool (Upstream), shared by every app with a backend there.
type httpLeg struct {
	hc      *fasthttp.HostClient
	watches *watches
}

// RoundTrip sends r (ReverseProxy's outgoing request) on a connection of
// the pool and returns the response, its body streaming from the
// connection; closing the body gives the connection back (or closes it,
// if the body did not end cleanly).
func (l *httpLeg) RoundTrip(r *http.Request) (*http.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	h := &req.Header
	h.DisableNormalizing()
	h.SetNoDefaultContentType(true) // fasthttp would add one to a body sent without
	h.SetMethod(r.Method)
	h.SetRequestURI(r.URL.RequestURI())
	h.SetHost(r.Host)
	for k, vs := range r.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue // framing and the connection are the leg's own
		case "Expect":
			continue // levee has the body already or streams it: never waits for a 100
		case "User-Agent":
			if len(vs) == 1 && vs[0] == "" {
				continue // ReverseProxy's way of saying: send none
			}
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if r.Close {
		h.SetConnectionClose()
	}
	var body *errBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = &errBody{r: r.Body}
		req.SetBodyStream(body, int(r.ContentLength)) // -1: chunked
	}
	resp := fasthttp.AcquireResponse()
	ctx := r.Context()
	if ctx.Done() != nil {
		l.watches.add(req, ctx)
	}
	err := l.hc.Do(req, resp)
	if ctx.Done() != nil {
		l.watches.remove(req)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if body != nil && body.err != nil {
			return nil, body.err // the client's body failed, not the backend
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	return httpResponse(r, resp), nil
}

// httpResponse is resp as net/http's, its body streaming from resp's
// connection, each read bounded by response_header_timeout (backendConn).
func httpResponse(r *http.Request, resp *fasthttp.Response) *http.Response {
	code := resp.StatusCode()
	res := &http.Response{Status: strconv.Itoa(code) + " " + http.StatusText(code), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header: make(http.Header, resp.Header.Len()), ContentLength: -1, Body: http.NoBody}
	endToEnd(&resp.Header, func(k, v []byte) {
		key := http.CanonicalHeaderKey(string(k))
		res.Header[key] = append(res.Header[key], string(v))
	})
	if n := resp.Header.ContentLength(); n >= 0 {
		res.ContentLength = int64(n)
		res.Header["Content-Length"] = []string{strconv.Itoa(n)}
	}
	bs := resp.BodyStream()
	if bs == nil || r.Method == http.MethodHead {
		releaseBody(resp, nil)
		fasthttp.ReleaseResponse(resp)
		return res
	}
	if c := connOf(resp); c != nil {
		c.streamBody()
	}
	res.Body = &legBody{resp: resp, r: bs}
	return res
}

// legBody is a response body on the net/http engine; Close gives its
// connection back if the body ended cleanly, else closes it.
type legBody struct {
	resp *fasthttp.Response // nil once closed
	r    io.Reader
}

func (b *legBody) Read(p []byte) (int, error) {
	if b.resp == nil {
		return 0, io.ErrClosedPipe
	}
	return b.r.Read(p)
}

func (b *legBody) Close() error {
	if b.resp != nil {
		releaseBody(b.resp, nil)
		fasthttp.ReleaseResponse(b.resp)
		b.resp = nil
	}
	return nil
}

// errBody passes a request body on and remembers why reading it failed: a
// client's body that fails is the client's failure, never the backend's.
type errBody struct {
	r   io.Reader
	err error
}

func (b *errBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// endToEnd calls f with each end-to-end field of a backend's response
// head: not hop-by-hop, not named by its Connection fields, not
// Content-Length (the caller frames the body).
func endToEnd(in *fasthttp.ResponseHeader, f func(k, v []byte)) {
	var conn connTokens
	for k, v := range in.All() {
		if ascii.EqualFold(k, "Connection") {
			conn.add(v)
		}
	}
	for k, v := range in.All() {
		if isHopByHop(k) || conn.has(k) || ascii.EqualFold(k, "Content-Length") {
			continue
		}
		f(k, v)
	}
}

// watches are the contexts of the requests in flight on the net/http
// engine, by request, for the exchange to find (HostClient.Do takes no
// context). Safe for concurrent use.
type watches struct {
	n atomic.Int64 // entries in m: none, and a lookup costs one load
	m sync.Map     // *fasthttp.Request → context.Context
}

func (w *watches) add(req *fasthttp.Request, ctx context.Context) {
	w.n.Add(1)
	w.m.Store(req, ctx)
}

func (w *watches) remove(req *fasthttp.Request) {
	w.m.Delete(req)
	w.n.Add(-1)
}

// of returns req's context, or nil.
func (w *watches) of(req *fasthttp.Request) context.Context {
	if w == nil || w.n.Load() == 0 {
		return nil
	}
	if v, ok := w.m.Load(req); ok {
		return v.(context.Context)
	}
	return nil
}
