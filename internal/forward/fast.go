package forward

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"iter"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/deadline"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/spill"
)

// newFastClient returns the fasthttp client for one backend address, the
// pool of both engines: at most MaxConnsPerBackend connections, a
// request beyond that waiting up to response_header_timeout for one.
//
// response_header_timeout bounds the wait for the response header, from the
// end of the request (HostClient.ReadTimeout), then each read of the body:
// a body read that gets no byte for that long fails, however long the whole
// body takes (see backendConn). Every connection that ends an exchange
// cleanly goes back to the idle pool (see PoolStats); idle ones close after
// IdleTimeout.
//
// The connections are levee's pool's (h1Pool), and the exchange on each is
// levee's (exchange): a connection goes back to the pool only after a
// clean one; those closed otherwise are counted in unclean (nil: not
// counted). HostClient drives the exchange and its one retry. The
// exchange finds the contexts of the net/http engine's requests in w (nil:
// none). It returns the dialer too (the pool's stats and dial budget).
func newFastClient(addr string, u config.Upstream, unclean *Unclean, w *watches) (*fasthttp.HostClient, *fastDialer, *h1Pool) {
	d := newFastDialer(u)
	wait := u.ResponseHeaderTimeout.D()
	pool := newH1Pool(func() (*backendConn, error) { return d.dialPooled(addr) }, d.stats, u.MaxConnsPerBackend, wait, u.IdleTimeout.D())
	hc := &fasthttp.HostClient{
		Addr:                          addr,
		ReadTimeout:                   wait,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: true,
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
		MaxIdemponentCallAttempts:     2,
		// Retry once, on a fresh connection, only an idempotent request without a
		// body stream whose kept-alive connection closed under it: the backend may
		// have acted on a POST before closing, and a second copy must never go out.
		RetryIfErr: func(req *fasthttp.Request, _ int, err error) (bool, bool) {
			return false, isIdempotent(&req.Header) && !req.IsBodyStream() &&
				(errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF))
		},
		Transport: &exchange{unclean: unclean, watches: w, addr: addr, pool: pool},
	}
	return hc, d, pool
}

// exchangeOf is the exchange hc does on its connections: newFastClient's.
func exchangeOf(hc *fasthttp.HostClient) *exchange { return hc.Transport.(*exchange) }

// errBodyTooLarge is a request body cut off at limits.body while streaming.
var errBodyTooLarge = errors.New("forward: request body too large")

// Body is a request body as the server hands it on: limits.body, and what
// it read of the body before the request was admitted.
type Body struct {
	Limit int64  // limits.body, enforced on what still streams
	Head  []byte // read ahead of admission; valid until ServeFast returns
	// Whole: Head is the whole body, sent with its length. Otherwise the
	// rest follows Head from Rest, or from the request's own stream.
	Whole bool
	Rest  io.Reader
	// Items, if set, gets the batch items the body held (limits.batch),
	// once it has gone to the backend: for the top clients by items.
	Items *int
	// Shadow is the Levee-Shadow value the backend gets: the reasons a
	// shadowed limit would have refused the request for ("": none).
	Shadow string
	// Trace is what tracing changes of the request's trace context.
	Trace TraceHeaders
	// Deadline is when the request's time is up (the client's deadline
	// or the app's upstream.deadline.timeout); the backend learns what is left
	// (Levee-Deadline, and grpc-timeout for gRPC). Zero: none.
	Deadline time.Time
	// Loop, if set, is a call an event loop began (StartLoop) and hands
	// on: serve goes on from where it left it.
	Loop *LoopCall
	// sent is the loop's request already written (resume): the first
	// try reads its answer.
	sent *sentCall
}

// TraceHeaders is how a traced request's W3C trace context goes to the
// backend; the zero value passes the client's headers on as sent.
type TraceHeaders struct {
	// Traceparent, when set, replaces every traceparent the client sent.
	Traceparent []byte
	// DropTracestate removes the client's tracestate fields.
	DropTracestate bool
}

// ServeFast forwards ctx's request (fasthttp engine) to the next backend and
// passes back the response. It owns slot and releases it exactly once: when
// the backend's answer has been read (whole, for a response of at most
// response_buffer bytes), when a streamed response has been passed on, or
// when the upgraded connection has closed; perhaps after ServeFast returns.
// sh counts batch items (nil counts nothing).
func (p *Pool) ServeFast(ctx *fasthttp.RequestCtx, body Body, sh *shape.Checker, slot admit.Releaser) {
	p.serve(fastDown{ctx}, body, sh, slot)
}

// serve is the forward core of both engines: it picks a backend for d's
// request and forwards it (see ServeFast).
func (p *Pool) serve(d downstream, body Body, sh *shape.Checker, slot admit.Releaser) {
	if lc := body.Loop; lc != nil {
		body.Loop = nil
		p.resume(d, lc, body, sh)
		return
	}
	start := time.Now()
	key := d.key(p.key)
	bal := p.balancer(key)
	i := bal.Pick(key, start)
	if i == balance.NoBackend {
		p.onReject(reasonNoBackend)
		d.fail(failure{rep: reply.NoBackendReply})
		admit.Release(slot, fasthttp.StatusServiceUnavailable)
		return
	}
	be := p.backends[i]
	be.requests.Inc()
	pk := newPick(p, bal, i, start, slot)
	p.forward(d, be, body, sh, pk)
}

func (p *Pool) forward(d downstream, be *backend, in Body, sh *shape.Checker, pk *pick) {
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	upgrading := d.copyHead(p, &out.Header, in.Trace)
	p.headExtras(&out.Header, in)
	if upgrading {
		p.tunnel(d.(fastDown).c, be, out, pk) // only fasthttp's requests upgrade
		return
	}
	var body *limitedBody
	var streamed *shape.BatchReader // counts a body as it streams
	bs, n, readWhole := d.stream()
	whole := in.Head
	if bs == nil && !in.Whole {
		whole = readWhole
	}
	switch {
	case in.Whole || bs == nil:
		if b := whole; len(b) > 0 {
			// Read whole: count its batch before any backend work.
			if br := sh.BatchReader(nil); br != nil {
				br.Reset(bytes.NewReader(b)) // a reader made only for a batch limit
				_, err := io.Copy(io.Discard, br)
				countItems(in.Items, br)
				if err != nil {
					p.failed(d, be, err, nil)
					pk.finish(d)
					return
				}
			}
			if p.bw == nil {
				out.SetBodyRaw(b)
				break
			}
			// Read ahead, but paced to the backend all the same.
			body = &limitedBody{r: p.bw.Reader(d.context(), bytes.NewReader(b)), left: in.Limit, want: int64(len(b))}
			out.SetBodyStream(body, len(b))
		}
	case bs != nil:
		if in.Rest != nil {
			bs = in.Rest
		}
		if len(in.Head) > 0 {
			bs = io.MultiReader(bytes.NewReader(in.Head), bs)
		}
		if p.bw != nil {
			bs = p.bw.Reader(d.context(), bs)
		}
		body = &limitedBody{r: bs, left: in.Limit, want: int64(n)}
		var r io.Reader = body
		if br := sh.BatchReader(body); br != nil {
			r, streamed = br, br
		}
		out.SetBodyStream(r, n)
	}
	var t tries
	retrying := p.retry.enabled(len(p.backends))
	if retrying {
		p.retry.budget.Request(p.clk.Now())
		t.add(pk.i)
	}
	resp := fasthttp.AcquireResponse()
	watched := d.watch()
	if _, ok := watched.(watcher); !ok && watched != nil && watched.Done() == nil {
		watched = nil // cannot end (a watcher can, and Done may allocate)
	}
	call := legCall{watched: watched, body: d.bodyCloser(), sent: in.sent}
	for {
		err := be.up.do(out, resp, call)
		call.sent = nil // a try again writes the request
		if !retrying || !p.retryTry(d, resp, err, body, pk, &t) {
			if streamed != nil && (err != nil || be.up.h2 == nil) {
				// The body has gone (HTTP/1.1 writes it before the
				// response is read), or nothing reads it any more. On
				// HTTP/2 it may still stream: counted when it has ended.
				countItems(in.Items, streamed)
				streamed = nil
			}
			if err != nil {
				fasthttp.ReleaseResponse(resp)
				if watched == nil || watched.Err() == nil {
					p.failed(d, be, err, body)
				} // else the client is gone: no one to answer, nothing to log
				pk.finish(d)
				return
			}
			break
		}
		be = p.backends[pk.i]
		be.requests.Inc()
	}
	d.respond(resp)
	if bs := resp.BodyStream(); bs != nil && !d.head() {
		p.passBody(d, be, resp, bs, pk)
		if _, inline := d.(*httpDown); inline && streamed != nil {
			// net/http's send wrote the whole answer, so the HTTP/2
			// exchange, and any read of the request body, is over. (On
			// fasthttp it is written later: the items go uncounted.)
			countItems(in.Items, streamed)
		}
		return
	}
	releaseBody(resp, nil) // the exchange is over
	if streamed != nil {
		countItems(in.Items, streamed)
	}
	fasthttp.ReleaseResponse(resp)
	d.send(nil, 0)
	pk.finish(d)
}

// headExtras adds to a request's head what levee tells its backend beside
// the client's fields: the shadowed limits, and the time left.
func (p *Pool) headExtras(out *fasthttp.RequestHeader, in Body) {
	if in.Shadow != "" {
		out.Set(reply.Shadow, in.Shadow)
	}
	if !in.Deadline.IsZero() {
		p.handOnDeadline(out, in.Deadline)
	}
}

// countItems stores the items br counted in dst, if set.
func countItems(dst *int, br *shape.BatchReader) {
	if dst != nil {
		*dst = br.Count()
	}
}

// passBody passes a backend's response body on to the client. A body of
// known length up to response_buffer is read whole first, and the backend
// connection and the slot are given back before the client reads a byte;
// a longer one, or one without a length, streams through, holding both
// until the backend's end. Either way a client that reads slower than
// server.min_rate is cut off.
func (p *Pool) passBody(d downstream, be *backend, resp *fasthttp.Response, bs io.Reader, pk *pick) {
	n := resp.Header.ContentLength()
	pk.code = resp.StatusCode()
	now := time.Now()
	fb := d.newBody()
	*fb = fastBody{p: p, resp: resp, r: bs, slot: pk, d: d, start: now}
	if wt := p.writeTimeout; wt > 0 {
		fb.limit = now.Add(wt)
	}
	if c := connOf(resp); c != nil {
		c.streamBody() // each body read is bounded, not the whole body
	}
	if p.bw != nil {
		// Paced as it is read from the backend (into the buffer too); a cut
		// ends the body with an error.
		fb.r, fb.onCut = p.bw.Reader(d.context(), bs), p.onReject
	}
	switch {
	case n >= 0 && int64(n) <= p.respBuffer:
		fb.head.Init(p.buffers)
		fb.head.Reserve(n)
		done, err := fb.head.Fill(fb.r, n)
		if err != nil {
			p.bodyFailed(d, be, fb, pk, err)
			return
		}
		if done || fb.head.Len() == n {
			fb.backendDone(nil)
		}
	case n > 0 && p.spill != nil:
		// Streamed, and spilled only if the client turns out slow: a
		// write to it that takes spillAfter (see fastBody.spillLate).
		fb.total = int64(n)
		fb.spillTimer = time.AfterFunc(time.Hour, fb.spillLate)
		fb.spillTimer.Stop()
	}
	if n < 0 {
		n = -1 // chunked to the client, whatever the backend's framing
	}
	d.send(fb, n)
}

// spillAfter is how long a write of a response to its client may take
// before the rest of the body is spilled: a write that long is waiting
// for a client that reads slower than the backend sends (a socket's send
// buffer full), while one to a client that keeps up returns at once.
const spillAfter = 20 * time.Millisecond

// Spill states of a fastBody (state).
const (
	spillIdle    int32 = iota // between reads: the timer may spill
	spillReading              // a Read is under way
	spillRunning              // spillLate fills the file
	spillDone                 // spilled, refused, or closed: nothing more to do
)

// spillLate runs when a write to the client has taken spillAfter: it
// reads the rest of the body from the backend into a spill file, as fast
// as the backend sends it, and gives back the backend connection and the
// slot; the client reads the file from then on. A body the spill budget
// refuses (counted, with its reason) goes on streaming as before. It runs
// on the timer's goroutine, while the client's write waits; mu keeps Read
// and CloseWithError out until it is done.
func (b *fastBody) spillLate() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.CompareAndSwap(spillIdle, spillRunning) {
		return // a Read is under way (it re-arms the timer), or done
	}
	defer b.state.Store(spillDone)
	rest := b.total - b.sent
	f, err := b.p.spill.Open(rest, b.total, b.p.respSpill)
	if err != nil {
		return // streams, holding the slot; counted
	}
	if err := f.Fill(b.r); err != nil {
		// The backend failed mid-body after the client had some of it:
		// its response is cut, never ended as if complete.
		f.Close()
		b.spillErr = err
		return
	}
	b.file = f
	b.backendDone(nil)
}

// bodyFailed answers d when the backend failed (or was paced too long)
// mid-body while levee held the body, before the client has had a byte:
// it gets levee's answer instead of a truncated one.
func (p *Pool) bodyFailed(d downstream, be *backend, fb *fastBody, pk *pick, err error) {
	fb.head.Free()
	if fb.file != nil {
		fb.file.Close()
		fb.file = nil
	}
	releaseBody(fb.resp, err)
	fasthttp.ReleaseResponse(fb.resp)
	fb.resp = nil
	p.failed(d, be, err, nil)
	pk.finish(d)
}

// failed answers d for a request whose exchange with be failed with err.
func (p *Pool) failed(d downstream, be *backend, err error, body *limitedBody) {
	var bodyErr error
	if body != nil {
		bodyErr = body.err
	}
	d.fail(p.fail(be.addr, err, bodyErr))
}

// limitedBody passes a request body on, failing once more than left bytes
// have come, or when the client's body ends short of its declared length
// (want; -1: chunked), and remembers why reading stopped: a client that
// leaves mid-body is the client's failure, never the backend's.
type limitedBody struct {
	r       io.Reader
	left    int64
	want    int64
	got     int64
	err     error
	touched bool // Read was called: some of the body may have gone out
}

func (b *limitedBody) Read(p []byte) (int, error) {
	b.touched = true
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		b.err = errBodyTooLarge
		return int(b.left), b.err
	}
	b.left -= int64(n)
	b.got += int64(n)
	if err == io.EOF && b.want >= 0 && b.got < b.want {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// fastBody passes a backend's response body to the client: first what was
// read ahead (head), then what was spilled to disk (file), then the rest
// from the backend (r). The backend's response and the slot are given back
// at the backend's end, or at Close (fasthttp closes the body after writing
// it, or when it fails); the file at Close.
type fastBody struct {
	p     *Pool
	resp  *fasthttp.Response // nil once the backend's part is done
	head  membuf.Buffer
	off   int
	file  *spill.File    // nil: none
	r     io.Reader      // the backend's body, paced when bandwidth is limited
	onCut func(string)   // counts a bandwidth cut; nil when unpaced
	slot  admit.Releaser // nil once released
	once  sync.Once

	// A body of known length (total) may spill once its client is slow:
	// spillTimer runs spillLate if a write takes spillAfter; state and mu
	// keep it and Read apart (nil timer: no spill).
	total      int64
	spillTimer *time.Timer
	state      atomic.Int32
	mu         sync.Mutex
	spillErr   error

	// trailer is what the backend sent after the body (HTTP/2), once
	// its body has ended whole; nil: none.
	trailer http.Header

	// server.min_rate, on the client's writes: each read sets the write
	// deadline of the bytes it returns.
	d            downstream
	start, limit time.Time
	sent         int64
	paced        bool // a write deadline of min_rate's is set
}

// unpacedBytes go out without a deadline of min_rate's: they fit in the
// socket's send buffer, so their write returns at once however slow the
// client is.
const unpacedBytes = 16 << 10

func (b *fastBody) Read(p []byte) (int, error) {
	if b.spillTimer != nil {
		b.spillTimer.Stop()
		if !b.state.CompareAndSwap(spillIdle, spillReading) {
			b.mu.Lock() // spillLate may be under way: wait for its end
			b.mu.Unlock()
			if b.spillErr != nil {
				return 0, b.spillErr
			}
		}
	}
	var n int
	var err error
	switch {
	case b.off < b.head.Len():
		n = copy(p, b.head.Bytes()[b.off:])
		b.off += n
		if b.resp == nil && b.file == nil && b.off == b.head.Len() {
			err = io.EOF
		}
	case b.file != nil:
		n, err = b.file.Read(p)
	case b.resp != nil:
		n, err = b.r.Read(p)
		if b.onCut != nil && errors.Is(err, bandwidth.ErrTooSlow) {
			b.onCut(reasonBandwidth)
		}
		if err == io.EOF {
			b.backendDone(nil)
		}
	default:
		err = io.EOF
	}
	b.sent += int64(n)
	if b.spillTimer != nil {
		// Decided before the state is idle: from then on a timer armed
		// for an earlier write may run spillLate, which changes b.resp.
		rearm := b.resp != nil && err == nil
		if b.state.CompareAndSwap(spillReading, spillIdle) && rearm {
			b.spillTimer.Reset(spillAfter) // the write of these n bytes comes next
		}
	}
	if rate := b.p.minRate; rate.Rate > 0 && b.sent > unpacedBytes && n > 0 {
		// The write of what this read returns comes next (the engine's
		// buffer flushes before its next read).
		b.d.setWriteDeadline(rate.WriteDeadline(b.start, time.Now(), int64(n), b.limit))
		b.paced = true
	}
	return n, err
}

// backendDone gives back the backend's response (its connection; err,
// if any, keeps it from reuse) and the slot: the backend has sent all it
// will, or the client is gone.
func (b *fastBody) backendDone(err error) {
	if b.resp != nil {
		if t, ok := b.resp.BodyStream().(interface{ trailers() http.Header }); ok && err == nil {
			defer func() { b.trailer = t.trailers() }() // read once the body is closed
		}
		releaseBody(b.resp, err)
		fasthttp.ReleaseResponse(b.resp)
		b.resp = nil
	}
	if b.slot != nil {
		b.slot.Release()
		b.slot = nil
	}
}

// fastBodies keeps the bodies of HTTP/1.1 answers (fastDown.newBody) for
// the next: one a proxied request, which is most of them.
var fastBodies sync.Pool

// CloseWithError passes err on, so a connection whose response was cut off
// is closed rather than reused; a write that missed min_rate's deadline is
// counted and logged. fastBody has no Close: fasthttp would call it first,
// without the error.
//
// fasthttp calls it once, when it has written the body or given up on
// it, and holds the body no more: a body of fastDown's then goes back to
// fastBodies. One with a spill timer does not, since the timer's
// spillLate may yet run (and find it done); neither does net/http's,
// which is part of its httpDown.
func (b *fastBody) CloseWithError(err error) error {
	b.close(err)
	if _, fast := b.d.(fastDown); fast && b.spillTimer == nil {
		*b = fastBody{}
		fastBodies.Put(b)
	}
	return nil
}

func (b *fastBody) close(err error) {
	b.once.Do(func() {
		if b.spillTimer != nil {
			b.spillTimer.Stop()
			b.mu.Lock() // spillLate may be under way: wait for its end
			b.state.Store(spillDone)
			b.mu.Unlock()
		}
		b.backendDone(err)
		b.head.Free()
		if b.file != nil {
			b.file.Close()
		}
		if err != nil && b.paced && isTimeout(err) && (b.limit.IsZero() || time.Now().Before(b.limit)) {
			b.p.onReject(reply.MinRate)
			b.p.logTooSlow("response", int64(b.sent), b.d.remote(), err)
		}
	})
}

// copyRequest writes on out the request line and end-to-end headers of
// ctx's request, and levee's forwarding headers; identity headers levee does
// not set (X-Real-IP and the like) pass only from a trusted peer. It reports whether the
// request asks for a protocol upgrade that levee passes on (never h2c).
func (p *Pool) copyRequest(ctx *fasthttp.RequestCtx, out *fasthttp.RequestHeader) (upgrading bool) {
	return p.copyRequestTraced(ctx, out, TraceHeaders{})
}

// copyRequestTraced is copyRequest with the trace context of tc.
func (p *Pool) copyRequestTraced(ctx *fasthttp.RequestCtx, out *fasthttp.RequestHeader, tc TraceHeaders) (upgrading bool) {
	in := &ctx.Request.Header
	out.DisableNormalizing()
	out.SetNoDefaultContentType(true) // fasthttp would add one to a body sent without
	out.SetMethodBytes(in.Method())
	out.SetRequestURIBytes(in.RequestURI())
	conn, upgrade := connectionOf(in)
	// An upgrade with a body (a length, or chunked; fasthttp reads one
	// without either as -2) is served as an ordinary request (RFC 9110
	// §7.8 lets a server ignore Upgrade): the tunnel would drop the body,
	// or pass it on as the new protocol's first bytes.
	n := in.ContentLength()
	upgrading = conn.has([]byte("upgrade")) && len(upgrade) > 0 && !hasH2C(upgrade) && n <= 0 && n != -1
	h2c := len(upgrade) > 0 && hasH2C(upgrade)
	for k, v := range in.All() {
		copyField(out, k, v, requestField(k, &conn, h2c, &tc), func() bool {
			return p.trust.trustsFast(ctx) // peer looked up only when such a header is sent
		})
	}
	if tc.Traceparent != nil {
		out.AddBytesV("traceparent", tc.Traceparent)
	}
	if upgrading {
		out.Set("Connection", "Upgrade")
		out.SetBytesV("Upgrade", upgrade)
	}
	p.trust.setForwardedFast(ctx, out)
	return upgrading
}

// What copying a request's head does with one of its fields
// (requestField).
const (
	fieldDrop     = iota
	fieldPass     // copied as it is
	fieldTE       // Te: only its "trailers" passes
	fieldHost     // the one Host
	fieldIdentity // X-Real-IP and the like: passes only from a trusted peer
)

// requestField says what becomes of a request's field named k on its way
// to the backend: hop-by-hop fields (and those Connection names), the
// forwarding fields levee sets, the framing levee redoes, Proxy, levee's
// own and, with h2c, HTTP2-Settings, are dropped, as is the trace context
// levee replaces (tc). Both HTTP/1.1 heads (fasthttp's and the event
// loop's) are copied by it.
func requestField(k []byte, conn *connTokens, h2c bool, tc *TraceHeaders) int {
	switch {
	case ascii.EqualFold(k, "Te"):
		return fieldTE
	case ascii.EqualFold(k, "Host"):
		return fieldHost
	case isHopByHop(k) || conn.has(k) || isForwarding(k) ||
		ascii.EqualFold(k, "Content-Length") || ascii.EqualFold(k, "Expect") || isProxy(k) || ascii.EqualFold(k, reply.Shadow) ||
		ascii.EqualFold(k, deadline.Header):
		return fieldDrop
	case isIdentity(k):
		return fieldIdentity
	case ascii.EqualFold(k, "Http2-Settings") && h2c:
		return fieldDrop
	case tc.Traceparent != nil && (ascii.EqualFold(k, "Traceparent") || tc.DropTracestate && ascii.EqualFold(k, "Tracestate")):
		return fieldDrop
	}
	return fieldPass
}

// copyField copies the field k: v onto out as requestField said (kind);
// trusted is asked, for an identity field, whether the peer may send one.
func copyField(out *fasthttp.RequestHeader, k, v []byte, kind int, trusted func() bool) {
	switch kind {
	case fieldPass:
		out.AddBytesKV(k, v)
	case fieldTE:
		if hasToken(v, "trailers") {
			out.Add("Te", "trailers")
		}
	case fieldHost:
		// levee's own: the authority that routed the request, which
		// Connection cannot strip (RFC 9112 §3.2: one Host, always).
		out.SetHostBytes(v)
	case fieldIdentity:
		if trusted() {
			out.AddBytesKV(k, v)
		}
	}
}

// connectionOf reads a request's hop-by-hop vocabulary: the header names
// its Connection headers list, and its Upgrade value (the last one).
func connectionOf(in *fasthttp.RequestHeader) (conn connTokens, upgrade []byte) {
	for k, v := range in.All() {
		switch {
		case ascii.EqualFold(k, "Connection"):
			conn.add(v)
		case ascii.EqualFold(k, "Upgrade"):
			upgrade = v
		}
	}
	return conn, upgrade
}

// copyResponse copies a backend's status and end-to-end headers to out.
func copyResponse(out, in *fasthttp.Response) {
	out.Header.DisableNormalizing()
	out.Header.SetNoDefaultContentType(true)
	out.SetStatusCode(in.StatusCode())
	endToEnd(&in.Header, out.Header.AddBytesKV)
	if n := in.Header.ContentLength(); n >= 0 {
		out.Header.SetContentLength(n)
	}
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

// hopByHop are the headers that describe one connection (RFC 9110 §7.6.1),
// never forwarded (of a request's Te, "trailers" passes).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te",
	"Transfer-Encoding", "Upgrade", "Proxy-Authenticate", "Proxy-Authorization", "Trailer"}

func isHopByHop[T string | []byte](k T) bool {
	for _, h := range hopByHop {
		if ascii.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// isProxy matches the Proxy request header, which no standard defines and
// CGI backends read as HTTP_PROXY, their outbound proxy (httpoxy,
// CVE-2016-5385): never forwarded.
func isProxy[T string | []byte](k T) bool { return ascii.EqualFold(k, "Proxy") }

func isForwarding[T string | []byte](k T) bool {
	return ascii.EqualFold(k, "X-Forwarded-For") || ascii.EqualFold(k, "X-Forwarded-Host") ||
		ascii.EqualFold(k, "X-Forwarded-Proto") || ascii.EqualFold(k, "Forwarded")
}

// connTokens are the header names Connection headers list; they point into
// the header and are valid while it is.
type connTokens struct{ names [][]byte }

func (c *connTokens) add(v []byte) {
	for len(v) > 0 {
		var tok []byte
		if i := indexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		if tok = trimSpace(tok); len(tok) > 0 {
			c.names = append(c.names, tok)
		}
	}
}

func (c *connTokens) has(name []byte) bool {
	for _, n := range c.names {
		if ascii.EqualFold(name, string(n)) {
			return true
		}
	}
	return false
}

func hasH2C(upgrade []byte) bool {
	for _, tok := range splitTokens(upgrade) {
		name := tok
		if i := indexByte(tok, '/'); i >= 0 {
			name = tok[:i]
		}
		if ascii.EqualFold(trimSpace(name), "h2c") {
			return true
		}
	}
	return false
}

func hasToken(v []byte, want string) bool {
	for len(v) > 0 { // splitTokens's tokens, without its slice
		tok := v
		if i := indexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if ascii.EqualFold(trimSpace(tok), want) {
			return true
		}
	}
	return false
}

func splitTokens(v []byte) [][]byte {
	var out [][]byte
	for len(v) > 0 {
		i := indexByte(v, ',')
		if i < 0 {
			out, v = append(out, trimSpace(v)), nil
		} else {
			out, v = append(out, trimSpace(v[:i])), v[i+1:]
		}
	}
	return out
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// fastHeader reads a fasthttp request's forwarding headers, matching names
// in any case (header names are passed through unnormalised).
type fastHeader struct{ h *fasthttp.RequestHeader }

func (f fastHeader) all(name string) string   { return allValues(f.h.All(), name) }
func (f fastHeader) first(name string) string { return firstValue(f.h.All(), name) }

// allValues joins the values of every field named name (in any case) with
// ", "; firstValue is the first.
func allValues(fields iter.Seq2[[]byte, []byte], name string) string {
	var out []byte
	for k, v := range fields {
		if ascii.EqualFold(k, name) {
			if len(out) > 0 {
				out = append(out, ", "...)
			}
			out = append(out, v...)
		}
	}
	return string(out)
}

func firstValue(fields iter.Seq2[[]byte, []byte], name string) string {
	for k, v := range fields {
		if ascii.EqualFold(k, name) {
			return string(v)
		}
	}
	return ""
}

// tunnel passes an upgrade request to the backend over a connection of its
// own and, if the backend switches protocols, joins the client's connection
// to it until either side closes. The slot is held while the tunnel is open.
// Interim responses before the answer are skipped (at most maxInterim); an
// answer other than 101 is an ordinary response, streamed under the same
// buffer budget as any other (passBody), its connection closed at its end.
func (p *Pool) tunnel(ctx *fasthttp.RequestCtx, be *backend, out *fasthttp.Request, pk *pick) {
	conn, err := be.up.dialer.dialOwn(be.addr)
	if err != nil {
		p.failed(fastDown{ctx}, be, err, nil)
		pk.finish(fastDown{ctx})
		return
	}
	conn.stats.exchanges.Add(1)
	conn.SetDeadline(time.Now().Add(p.headerTimeout))
	bw := bufio.NewWriter(conn)
	br := bufio.NewReader(conn)
	resp := fasthttp.AcquireResponse()
	resp.Header.DisableNormalizing()
	resp.ParseNetConn(conn) // connOf finds conn: each body read is bounded
	if err = out.Write(bw); err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = readFinalHead(resp, br, true)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		conn.Close()
		p.failed(fastDown{ctx}, be, err, nil)
		pk.finish(fastDown{ctx})
		return
	}
	if code := resp.StatusCode(); code != fasthttp.StatusSwitchingProtocols {
		conn.SetDeadline(time.Time{})
		copyResponse(&ctx.Response, resp)
		body := &ownBody{conn: conn}
		n := body.frame.init(resp, br)
		if code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified || n == 0 || ctx.IsHead() {
			conn.Close()
			fasthttp.ReleaseResponse(resp)
			pk.finish(fastDown{ctx})
			return
		}
		resp.SetBodyStream(body, n)
		p.passBody(fastDown{ctx}, be, resp, body, pk)
		return
	}
	defer fasthttp.ReleaseResponse(resp)
	conn.SetDeadline(time.Time{})
	var sw fasthttp.Response
	copyResponse(&sw, resp)
	sw.Header.Set("Connection", "Upgrade")
	sw.Header.SetBytesV("Upgrade", resp.Header.Peek("Upgrade"))
	head := append([]byte(nil), sw.Header.Header()...)
	if n := br.Buffered(); n > 0 { // the backend may speak first
		rest, _ := br.Peek(n)
		head = append(head, rest...)
	}
	pk.code = fasthttp.StatusSwitchingProtocols
	ctx.HijackSetNoResponse(true)
	tcp := conn.Conn // the tunnel's bytes are not HTTP: no exchange bookkeeping on them
	ctx.Hijack(func(client net.Conn) {
		defer pk.Release()
		defer conn.Close()
		if _, err := client.Write(head); err != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(client, tcp)
			client.Close()
		}()
		io.Copy(tcp, client)
		conn.Close()
		<-done
	})
}

// ownBody is a response body on a connection of its own (an upgrade the
// backend answered without switching): the connection closes at the
// body's end or when the body is closed, never pooled.
type ownBody struct {
	conn  net.Conn
	frame bodyFrame
	done  bool
}

func (b *ownBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.frame.read(p)
	if err != nil {
		b.CloseWithError(err)
	}
	return n, err
}

// CloseWithError is fasthttp.ReadCloserWithError's.
func (b *ownBody) CloseWithError(error) error {
	if !b.done {
		b.done = true
		b.conn.Close()
	}
	return nil
}

// isIdempotent is isIdempotentMethod for a fasthttp request (the short
// conversion stays on the stack).
func isIdempotent(h *fasthttp.RequestHeader) bool { return isIdempotentMethod(string(h.Method())) }

// pick is one request's choice of backend; releasing it reports the outcome
// to the balancer (which counts the backend's in-flight requests and learns
// its latency) and then gives back the admission slot.
type pick struct {
	p     *Pool
	bal   balance.Balancer
	i     int
	start time.Time
	slot  admit.Releaser
	code  int // the status sent; 0 if none was
}

var picks = sync.Pool{New: func() any { return new(pick) }}

func newPick(p *Pool, bal balance.Balancer, i int, start time.Time, slot admit.Releaser) *pick {
	pk := picks.Get().(*pick)
	*pk = pick{p: p, bal: bal, i: i, start: start, slot: slot}
	return pk
}

// finish records the status d is answering with, then releases.
func (pk *pick) finish(d downstream) {
	pk.code = d.status()
	pk.Release()
}

// Release reports the outcome and gives back the slot; call it once.
func (pk *pick) Release() {
	pk.p.done(pk.bal, pk.i, outcomeOf(pk.code), pk.start)
	slot, code := pk.slot, pk.code
	*pk = pick{}
	picks.Put(pk)
	admit.Release(slot, code)
}

// retryTry decides, after a try of d's request that returned resp or
// err, whether to try again, and if so moves pk to the next backend (the
// failed try is reported to the balancer) and frees resp for the next try.
// Retried: a connect error if the body stream (if any) was never read; a
// listed status for an idempotent method whose body was read whole (never
// a stream).
func (p *Pool) retryTry(d downstream, resp *fasthttp.Response, err error, body *limitedBody, pk *pick, t *tries) bool {
	if err != nil {
		if !p.retry.onConnect || !isConnectError(err) || body != nil && body.touched {
			return false
		}
	} else if !p.retry.on(resp.StatusCode()) || !d.idempotent() || body != nil {
		return false
	}
	bal, i, ok := p.nextTry(pk.bal, t, time.Now())
	if !ok {
		return false
	}
	if err == nil {
		releaseBody(resp, nil)
		resp.Reset()
	}
	p.done(pk.bal, pk.i, balance.Failed, pk.start)
	pk.bal, pk.i, pk.start = bal, i, time.Now()
	t.add(i)
	return true
}
