package forward

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/deadline"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

// downstream is the client's side of one forwarded request, as an engine
// hands it to the forward core (Pool.forward): the request to copy, and
// the answer to write. There are two: fastDown (the fasthttp engine,
// HTTP/1.1) and httpDown (net/http's Handler: HTTP/2). Everything between
// them, from the pick of a backend to the release of the slot, is one
// code path.
type downstream interface {
	// context is the request's, for the bandwidth limiter's waits.
	context() context.Context
	// watch is the context whose end aborts the backend exchange (a reset
	// stream, a client gone); nil: none is watched.
	watch() context.Context
	// key is the request's hash key under k ("": none).
	key(k clientkey.Source) string
	// copyHead writes on out the request line, Host and the end-to-end
	// fields, with levee's forwarding fields and the trace context tc.
	// upgrading: the request asks for a protocol upgrade levee passes on.
	copyHead(p *Pool, out *fasthttp.RequestHeader, tc TraceHeaders) (upgrading bool)
	// bodyCloser is the client's body, which a leg closes to end a read
	// of it that waits when the exchange ends first; nil: none.
	bodyCloser() io.Closer
	// stream is the request body still to be read from the client and
	// its declared length (-1: unknown); a nil r with whole set is a body
	// the engine read whole itself; both nil: no body.
	stream() (r io.Reader, n int, whole []byte)
	idempotent() bool
	head() bool // HEAD: the response has no body
	// respond takes resp's status and end-to-end fields as the answer's;
	// nothing is written to the client yet.
	respond(resp *fasthttp.Response)
	// newBody is where passBody makes the answer's body: a new one, or
	// one of the downstream's own where nothing holds it once forward
	// has returned.
	newBody() *fastBody
	// send writes the answer respond began, with b as its body (n bytes,
	// -1 unknown; nil b: no body), and closes b when it is written or
	// failed (CloseWithError); that may be after forward returns.
	send(b *fastBody, n int)
	// fail replaces any answer begun with levee's f.
	fail(f failure)
	// status is the status of the answer so far (0: none).
	status() int
	// setWriteDeadline bounds the client's next write (server.min_rate).
	setWriteDeadline(t time.Time)
	// remote is the client's address, for logs.
	remote() string
}

// fastDown is the fasthttp engine's downstream. A struct of one pointer:
// it is an interface value without an allocation.
type fastDown struct{ c *fasthttp.RequestCtx }

func (d fastDown) context() context.Context      { return d.c }
func (d fastDown) watch() context.Context        { return nil } // a client gone is seen writing to it
func (d fastDown) key(k clientkey.Source) string { return FastKey(k, d.c) }

func (d fastDown) copyHead(p *Pool, out *fasthttp.RequestHeader, tc TraceHeaders) bool {
	return p.copyRequestTraced(d.c, out, tc)
}

func (d fastDown) stream() (io.Reader, int, []byte) {
	if bs := d.c.RequestBodyStream(); bs != nil {
		return bs, d.c.Request.Header.ContentLength(), nil
	}
	return nil, 0, d.c.Request.Body() // read whole by fasthttp (tests)
}

// bodyCloser is nil: fasthttp's body stream is fasthttp's to close.
func (d fastDown) bodyCloser() io.Closer { return nil }

func (d fastDown) idempotent() bool                { return isIdempotent(&d.c.Request.Header) }
func (d fastDown) head() bool                      { return d.c.IsHead() }
func (d fastDown) respond(resp *fasthttp.Response) { copyResponse(&d.c.Response, resp) }

// newBody is a body from fastBodies: fasthttp writes it after the handler
// returns, then closes it, and CloseWithError gives it back.
func (d fastDown) newBody() *fastBody {
	if b, ok := fastBodies.Get().(*fastBody); ok {
		return b
	}
	return new(fastBody)
}

// send hands b to fasthttp, which writes it after the handler returns and
// then closes it.
func (d fastDown) send(b *fastBody, n int) {
	if b != nil {
		d.c.Response.SetBodyStream(b, n)
	}
}

func (d fastDown) fail(f failure) {
	d.c.Response.Reset()
	f.fast(d.c)
}

func (d fastDown) status() int                  { return d.c.Response.StatusCode() }
func (d fastDown) setWriteDeadline(t time.Time) { d.c.Conn().SetWriteDeadline(t) }
func (d fastDown) remote() string               { return d.c.RemoteAddr().String() }

// httpDown is net/http's downstream: a Handler's request and response
// writer. Unlike fasthttp, net/http writes nothing after the handler
// returns, so send writes the whole answer itself.
type httpDown struct {
	w    http.ResponseWriter
	r    *http.Request
	rc   *http.ResponseController // made on first use
	code int                      // the status respond took
	// fields is respond's scratch, kept with the pooled httpDown.
	fields fieldScratch
	// body is newBody's: send writes it whole, and closes it, before
	// ServeRequest returns; a body that failed before it was sent is
	// dropped there too (bodyFailed).
	body fastBody
	// aborted: the answer was cut short after part of it was written.
	aborted bool
}

var httpDowns = sync.Pool{New: func() any { return new(httpDown) }}

func (d *httpDown) context() context.Context      { return d.r.Context() }
func (d *httpDown) watch() context.Context        { return d.r.Context() }
func (d *httpDown) key(k clientkey.Source) string { return k.HTTP(d.r) }

// copyHead is copyRequestTraced for net/http's request: the same fields
// pass and are dropped. net/http serves HTTP/2 here, where a request
// never upgrades (RFC 9113 §8.6).
func (d *httpDown) copyHead(p *Pool, out *fasthttp.RequestHeader, tc TraceHeaders) bool {
	r := d.r
	out.DisableNormalizing()
	out.SetNoDefaultContentType(true) // fasthttp would add one to a body sent without
	out.SetMethod(r.Method)
	if r.RequestURI != "" {
		out.SetRequestURI(r.RequestURI) // as sent, as the fasthttp engine passes it
	} else {
		out.SetRequestURI(r.URL.RequestURI())
	}
	out.SetHost(r.Host)
	var conn connTokens
	for _, v := range r.Header["Connection"] { // HTTP/1 only: HTTP/2 has none
		conn.add([]byte(v))
	}
	peer := peerIP(r.RemoteAddr)
	trusted := peer.IsValid() && p.trust.trusted(peer)
	for k, vs := range r.Header {
		switch {
		case k == "Te":
			for _, v := range vs {
				if hasToken([]byte(v), "trailers") {
					out.Add("Te", "trailers")
					break
				}
			}
		case isHopByHop(k) || len(conn.names) > 0 && conn.has([]byte(k)) || isForwarding(k) || k == "Host" ||
			k == "Content-Length" || k == "Expect" || isProxy(k) || k == reply.Shadow || k == "Http2-Settings" ||
			k == deadline.Header:
		case isIdentity(k) && !trusted:
		case tc.Traceparent != nil && (k == "Traceparent" || tc.DropTracestate && k == "Tracestate"):
		default:
			for _, v := range vs {
				out.Add(k, v)
			}
		}
	}
	if tc.Traceparent != nil {
		out.AddBytesV("traceparent", tc.Traceparent)
	}
	setForwarded(p.trust, out, peer, r.Host, r.TLS != nil, stdHeader(r.Header))
	return false
}

func (d *httpDown) stream() (io.Reader, int, []byte) {
	r := d.r
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, 0, nil
	}
	return r.Body, int(r.ContentLength), nil
}

func (d *httpDown) bodyCloser() io.Closer {
	if d.r.Body == nil || d.r.Body == http.NoBody {
		return nil
	}
	return d.r.Body
}

func (d *httpDown) idempotent() bool { return isIdempotentMethod(d.r.Method) }
func (d *httpDown) head() bool       { return d.r.Method == http.MethodHead }

// respond copies the fields in two allocations, whatever their number:
// one string holds every name (canonical) and value, and one array every
// field's value slice (of capacity one, so that an append to it copies).
// Neither is reused: the handler's header map may be read until the
// stream is done with it. (d.fields is reused: it is copied.)
func (d *httpDown) respond(resp *fasthttp.Response) {
	h := d.w.Header()
	b, lens := d.fields.buf[:0], d.fields.lens[:0]
	endToEnd(&resp.Header, func(k, v []byte) {
		n := len(b)
		if httpguts.ValidHeaderFieldName(string(k)) {
			b = appendCanonical(b, k)
		} else {
			b = append(b, k...) // as http.CanonicalHeaderKey leaves it
		}
		b = append(b, v...)
		lens = append(lens, len(b)-n-len(v), len(v))
	})
	cl := resp.Header.ContentLength()
	if cl >= 0 {
		n := len(b)
		b = strconv.AppendInt(b, int64(cl), 10)
		lens = append(lens, 0, len(b)-n)
	}
	d.fields.buf, d.fields.lens = b, lens
	d.code = resp.StatusCode()
	if len(lens) == 0 {
		return
	}
	all, vals := string(b), make([]string, len(lens)/2)
	off := 0
	for i := range vals {
		klen, vlen := lens[2*i], lens[2*i+1]
		key := all[off : off+klen]
		if cl >= 0 && i == len(vals)-1 {
			key = "Content-Length"
			delete(h, key)
		}
		vals[i] = all[off+klen : off+klen+vlen]
		if vv, ok := h[key]; ok {
			h[key] = append(vv, vals[i])
		} else {
			h[key] = vals[i : i+1 : i+1]
		}
		off += klen + vlen
	}
}

// fieldScratch is where respond gathers a response's fields before it
// copies them at once.
type fieldScratch struct {
	buf  []byte
	lens []int // name and value lengths, in turn
}

// appendCanonical appends the valid field name k in its canonical form,
// as http.CanonicalHeaderKey gives it.
func appendCanonical(b, k []byte) []byte {
	upper := true
	for _, c := range k {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
		upper = c == '-'
	}
	return b
}

func (d *httpDown) newBody() *fastBody { return &d.body }

// send writes the status, then b's bytes as they come. A body without a
// length, or an event stream, is flushed at each read, as it arrives;
// others go out as net/http's buffer fills. A body that fails after some
// of it was written marks the answer aborted: the caller resets the
// stream, so that the client cannot take a cut body for a whole one.
func (d *httpDown) send(b *fastBody, n int) {
	d.w.WriteHeader(d.code)
	if b == nil {
		return
	}
	flush := n < 0 || isEventStream(d.w.Header())
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	var err error
	for {
		m, rerr := b.Read(*buf)
		if m > 0 {
			if _, err = d.w.Write((*buf)[:m]); err != nil {
				break
			}
			if flush {
				if err = d.controller().Flush(); err != nil {
					break
				}
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
	}
	b.CloseWithError(err)
	d.aborted = err != nil
	if err == nil && b.trailer != nil {
		// Sent after the body (TrailerPrefix: announced by nobody, as
		// gRPC's grpc-status is).
		h := d.w.Header()
		for k, vs := range b.trailer {
			h[http.TrailerPrefix+k] = vs
		}
	}
}

func isEventStream(h http.Header) bool {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

func (d *httpDown) fail(f failure) {
	clear(d.w.Header())
	if ct := d.r.Header["Content-Type"]; len(ct) == 1 && reply.IsGRPC(ct[0]) {
		f.grpc(d.w)
		return
	}
	f.http(d.w)
}

func (d *httpDown) status() int {
	if s, ok := d.w.(interface{ Status() int }); ok {
		return s.Status()
	}
	return d.code
}

func (d *httpDown) controller() *http.ResponseController {
	if d.rc == nil {
		d.rc = http.NewResponseController(d.w)
	}
	return d.rc
}

func (d *httpDown) setWriteDeadline(t time.Time) { d.controller().SetWriteDeadline(t) }
func (d *httpDown) remote() string               { return d.r.RemoteAddr }

// ServeHTTP forwards r to the next backend and writes its response to w,
// with no admission slot and no body limit: for tests and tools. A cut
// answer resets the stream.
func (p *Pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.ServeRequest(w, r, Body{Limit: 1 << 62}, nil, nopSlot{}) {
		panic(http.ErrAbortHandler)
	}
}

type nopSlot struct{}

func (nopSlot) Release() {}

// ServeRequest is ServeFast for net/http's Handler (HTTP/2 connections):
// it forwards r to the next backend and writes the response to w. It owns
// slot and releases it exactly once, before it returns: when the backend's
// answer has been read (whole, for a response of at most response_buffer
// bytes; or spilled, for a slow client), else when the response has been
// written. If the answer was cut short after part of it reached w, it
// reports aborted, and the caller must reset the stream (panic with
// http.ErrAbortHandler, as ReverseProxy does) once its own bookkeeping is
// done. sh counts batch items (nil counts nothing). A panic of its own
// would leave slot held: there is none.
func (p *Pool) ServeRequest(w http.ResponseWriter, r *http.Request, body Body, sh *shape.Checker, slot admit.Releaser) (aborted bool) {
	d := httpDowns.Get().(*httpDown)
	fields := d.fields
	*d = httpDown{w: w, r: r, fields: fields}
	p.serve(d, body, sh, slot)
	aborted = d.aborted
	fields = d.fields
	if cap(fields.buf) > 16<<10 {
		fields = fieldScratch{}
	}
	*d = httpDown{fields: fields}
	httpDowns.Put(d)
	return aborted
}
