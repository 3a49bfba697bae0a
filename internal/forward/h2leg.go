package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/config"
)

// h2Leg is the HTTP/2 leg of one backend's pool (apps.NAME.upstream.protocol
// h2c or h2): its requests are streams of a few connections, each an
// http2.ClientConn over a connection levee dialled within the pool's dial
// budget. A request takes a stream on the first connection with one free
// (by the backend's SETTINGS_MAX_CONCURRENT_STREAMS), so the connections stay
// few; a new one is dialled only when every open one is full, one dial at a
// time, and at most upstream.max_conns_per_backend are open. At that bound a
// request waits for a stream, up to upstream.response_header_timeout.
//
// The balancer picks a backend per request before the leg is asked, so a
// multiplexed connection never pins a client to a backend. A connection
// the backend sends GOAWAY (or that failed) takes no new stream: its
// streams finish, and the next request that finds no free stream dials a
// new one, within the budget. Flow control is http2.Transport's: each
// stream's window (4 MiB) is a small part of the connection's (1 GiB), so
// a slow reader stalls its own stream, never the connection.
//
// Safe for concurrent use; it starts no goroutine of its own (each
// ClientConn runs its read loop until the connection closes).
type h2Leg struct {
	addr     string
	scheme   string      // "http" (h2c) or "https" (h2)
	tls      *tls.Config // nil: h2c
	t        *http2.Transport
	dialer   *fastDialer
	maxConns int
	wait     time.Duration // the longest wait for a stream, and for the response head

	mu      sync.Mutex
	conns   []*h2Conn // open and taking streams
	dialing bool
	changed chan struct{} // closed (and replaced) when a stream ends or a dial does, if anyone waits
	waiters int
}

// h2Conn is one connection of a leg.
type h2Conn struct {
	cc      *http2.ClientConn
	streams int // levee's requests on it now; under h2Leg.mu
}

// newH2Leg is the HTTP/2 leg to addr under the pool settings u and the
// app's upstream a (whose TLS validation loaded), dialling through d.
func newH2Leg(addr string, u config.Upstream, a config.AppUpstream, d *fastDialer) *h2Leg {
	l := &h2Leg{addr: addr, scheme: "http", dialer: d, maxConns: u.MaxConnsPerBackend,
		wait: u.ResponseHeaderTimeout.D(), changed: make(chan struct{})}
	if a.Protocol == config.ProtocolH2 {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		l.scheme, l.tls = "https", a.TLS.Config(host)
	}
	l.t = &http2.Transport{
		// A body is passed as the backend encoded it; the client decodes.
		DisableCompression: true,
		// The backend's stream limit is waited for here, not by dialling
		// past it: levee picks the connection (take).
		StrictMaxConcurrentStreams: true,
		IdleConnTimeout:            u.IdleTimeout.D(),
	}
	return l
}

// errNoStream is a request that found no free stream to its backend
// within the wait: a 504, as one that waited too long for a connection.
var errNoStream = errors.Join(fasthttp.ErrNoFreeConns,
	errors.New("forward: no HTTP/2 stream to the backend within the wait"))

// errHeadTimeout is a backend that did not send the response head within
// upstream.response_header_timeout: a 504.
var errHeadTimeout = errors.Join(fasthttp.ErrTimeout,
	errors.New("forward: no HTTP/2 response head within upstream.response_header_timeout"))

// take returns a connection with a stream counted for the caller, who
// must give it back (done). It waits for a stream or a dial up to l.wait,
// or until ctx ends.
func (l *h2Leg) take(ctx context.Context) (*h2Conn, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.mu.Lock()
		if c := l.freeLocked(); c != nil {
			c.streams++
			l.mu.Unlock()
			return c, nil
		}
		if !l.dialing && len(l.conns) < l.maxConns {
			l.dialing = true
			l.mu.Unlock()
			c, err := l.dial(ctx)
			l.mu.Lock()
			l.dialing = false
			if err == nil {
				l.conns = append(l.conns, c)
				c.streams++
			}
			l.wakeLocked()
			l.mu.Unlock()
			return c, err
		}
		if !l.dialing && len(l.conns) > 0 {
			// At the bound, every connection full: the emptiest one's
			// ClientConn waits for a stream (StrictMaxConcurrentStreams),
			// within the wait for the response head (try).
			c := l.conns[0]
			for _, o := range l.conns[1:] {
				if o.streams < c.streams {
					c = o
				}
			}
			c.streams++
			l.mu.Unlock()
			return c, nil
		}
		ch := l.changed
		l.waiters++
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(l.wait)
		}
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			err = errNoStream
		}
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// freeLocked is the first connection with a free stream, dropping those
// that take no more (closed, or draining after a GOAWAY). l.mu is held.
func (l *h2Leg) freeLocked() *h2Conn {
	for i := 0; i < len(l.conns); {
		c := l.conns[i]
		st := c.cc.State()
		if st.Closed || st.Closing {
			// Draining: its streams finish on it; it takes no new one.
			l.conns = append(l.conns[:i], l.conns[i+1:]...)
			continue
		}
		limit := int(st.MaxConcurrentStreams)
		if limit == 0 {
			limit = 100 // no SETTINGS yet: the transport's own assumption
		}
		if c.streams < limit {
			return c
		}
		i++
	}
	return nil
}

// done gives back c's stream.
func (l *h2Leg) done(c *h2Conn) {
	l.mu.Lock()
	c.streams--
	l.wakeLocked()
	l.mu.Unlock()
}

// wakeLocked tells the waiters, if any, to look again. l.mu is held.
func (l *h2Leg) wakeLocked() {
	if l.waiters > 0 {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// dial opens one connection within the dial budget: TCP, then TLS with
// ALPN h2 for protocol h2, then HTTP/2's preface and SETTINGS, both ways.
func (l *h2Leg) dial(ctx context.Context) (*h2Conn, error) {
	bc, err := l.dialer.dialOwn(l.addr)
	if err != nil {
		return nil, err
	}
	var nc net.Conn = newH2Socket(bc)
	if l.tls != nil {
		tc := tls.Client(nc, l.tls)
		hctx, cancel := context.WithTimeout(ctx, l.dialer.d.Timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err == nil && tc.ConnectionState().NegotiatedProtocol != "h2" {
			err = errors.New("forward: the backend did not negotiate h2 by ALPN")
		}
		if err != nil {
			nc.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: bc.RemoteAddr(), Err: err}
		}
		nc = tc
	}
	cc, err := l.t.NewClientConn(nc) //nolint:staticcheck // x/net's ClientConn over levee's own connection is the point
	if err != nil {
		nc.Close()
		return nil, err
	}
	// The backend's SETTINGS come before its PING's ack: once it is back,
	// the connection's stream limit is the backend's, not a guess that
	// would send streams the backend refuses.
	pctx, cancel := context.WithTimeout(ctx, l.dialer.d.Timeout)
	err = cc.Ping(pctx)
	cancel()
	if err != nil {
		cc.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: bc.RemoteAddr(), Err: err}
	}
	return &h2Conn{cc: cc}, nil
}

// closeIdle closes the connections without a stream; the others close
// once their streams end.
func (l *h2Leg) closeIdle() {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		st := c.cc.State()
		if st.StreamsActive == 0 && st.StreamsReserved == 0 && st.StreamsPending == 0 {
			c.cc.Close()
		} else {
			c.cc.SetDoNotReuse()
		}
	}
}

// legCall is what one try of a request carries to its leg beside the
// request: the context whose end aborts it (nil: none), and the client's
// body, closed to end a read the leg waits on when the exchange ends
// first (nil: none to close).
type legCall struct {
	watched context.Context
	body    io.Closer
}

// maxUnprocessed bounds the tries of a request the backend refused
// unprocessed (a GOAWAY or REFUSED_STREAM before it took the stream).
const maxUnprocessed = 3

// do sends out on a stream of the leg and reads the response head into
// resp; the body streams from resp's body stream, whose end (or close)
// gives the stream back. A request the backend did not process (GOAWAY,
// REFUSED_STREAM) is sent again on another connection if nothing of its
// body was read.
func (l *h2Leg) do(out *fasthttp.Request, resp *fasthttp.Response, call legCall) error {
	parent := call.watched
	if parent == nil {
		parent = context.Background()
	}
	for try := 1; ; try++ {
		body := newH2RequestBody(out, call.body)
		err := l.try(parent, out, body, resp)
		if err == nil || try == maxUnprocessed || !unprocessed(err) || body.touched.Load() {
			return err
		}
	}
}

func (l *h2Leg) try(parent context.Context, out *fasthttp.Request, body *h2RequestBody, resp *fasthttp.Response) error {
	ctx, cancel := context.WithCancelCause(parent)
	c, err := l.take(ctx)
	if err != nil {
		cancel(nil)
		return err
	}
	req := l.request(ctx, out, body)
	head := time.AfterFunc(l.wait, func() { cancel(errHeadTimeout) })
	l.dialer.stats.exchanges.Add(1)
	hr, err := c.cc.RoundTrip(req)
	head.Stop()
	if err != nil {
		if context.Cause(ctx) == errHeadTimeout {
			err = errHeadTimeout
		}
		body.Close()
		cancel(nil)
		l.done(c)
		return err
	}
	copyH2Response(resp, hr)
	b := &h2Body{l: l, c: c, hr: hr, req: body, cancel: cancel}
	if hr.Body == nil || hr.Body == http.NoBody || hr.ContentLength == 0 {
		b.end(nil) // a head without a body: its trailers, if any, are in the head
		resp.Header.SetContentLength(0)
		return nil
	}
	resp.SetBodyStream(b, int(hr.ContentLength)) // -1: to its end
	return nil
}

// unprocessed reports a request the backend never took (RFC 9113 §8.7):
// safe to send again, whatever its method.
func unprocessed(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	var ga http2.GoAwayError
	if errors.As(err, &ga) {
		return false // the stream may have been processed
	}
	s := err.Error()
	return strings.Contains(s, "http2: client conn not usable") ||
		strings.Contains(s, "http2: Transport received Server's graceful shutdown GOAWAY") ||
		strings.Contains(s, "http2: client conn is closed")
}

// request is out as net/http's request to the backend: the method,
// target and Host levee passes on (the target as sent), the fields
// copyHead chose, and the body.
//
// Its strings are slices of one: the method, target, Host and every
// value are copied once, together, and the common field names are
// constants, so a request costs a handful of allocations rather than
// three per field.
func (l *h2Leg) request(ctx context.Context, out *fasthttp.Request, body *h2RequestBody) *http.Request {
	type field struct {
		name       string // a constant, or "" for one copied
		nlen, vlen int
	}
	var (
		stack  [1024]byte
		fstack [32]field
	)
	h := &out.Header
	method, uri, host := h.Method(), h.RequestURI(), h.Host()
	buf := append(append(append(stack[:0], method...), uri...), host...)
	fields := fstack[:0]
	for k, v := range h.All() {
		if !h2PassesField(k) {
			continue
		}
		f := field{vlen: len(v)}
		if name, ok := h2FieldNames[string(k)]; ok {
			f.name = name
		} else {
			f.nlen = len(k)
			buf = append(buf, k...)
		}
		buf = append(buf, v...)
		fields = append(fields, f)
	}
	all := string(buf)
	next := func(n int) string {
		s := all[:n]
		all = all[n:]
		return s
	}
	req := &http.Request{Method: next(len(method)), Proto: "HTTP/2.0", ProtoMajor: 2,
		URL: &url.URL{Scheme: l.scheme, Host: l.addr}, Header: make(http.Header, len(fields))}
	target := next(len(uri))
	req.Host = next(len(host))
	path, query, hasQuery := strings.Cut(target, "?")
	req.URL.Opaque, req.URL.RawQuery, req.URL.ForceQuery = path, query, hasQuery && query == ""
	values := make([]string, len(fields))
	for i, f := range fields {
		key := f.name
		if key == "" {
			key = next(f.nlen)
		}
		values[i] = next(f.vlen)
		if vs, dup := req.Header[key]; dup {
			req.Header[key] = append(vs, values[i])
		} else {
			req.Header[key] = values[i : i+1 : i+1]
		}
	}
	if body.r != nil {
		req.Body, req.ContentLength = body, body.n
	}
	return req.WithContext(ctx)
}

// h2PassesField reports whether a request field goes on to an HTTP/2
// backend as a field: the stream frames the body, and :authority is Host.
func h2PassesField(k []byte) bool {
	return !ascii.EqualFold(k, "Host") && !ascii.EqualFold(k, "Content-Length") &&
		!ascii.EqualFold(k, "Transfer-Encoding") && !ascii.EqualFold(k, "Connection")
}

// h2FieldNames are the names of the fields most requests carry, as
// constants: looked up by a request's name without an allocation.
var h2FieldNames = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization",
		"Cache-Control", "Content-Type", "Cookie", "Forwarded", "Grpc-Accept-Encoding",
		"Grpc-Encoding", "Grpc-Timeout", "If-Modified-Since", "If-None-Match", "Levee-Deadline",
		"Origin", "Pragma", "Range", "Referer", "Te", "Traceparent", "Tracestate",
		"User-Agent", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"X-Real-Ip", "X-Request-Id"} {
		m[k] = k
	}
	return m
}()

// h2RequestBody is a request's body as the HTTP/2 client reads it, on its
// own goroutine. Close ends it for good: a read waiting on the client's
// side returns (the client's body is closed), and none is under way or
// starts once Close has returned, so the request's buffers can go back.
type h2RequestBody struct {
	r       io.Reader // nil: no body
	n       int64     // its length, -1 unknown
	down    io.Closer // the client's body; nil: none to close
	mu      sync.Mutex
	closed  atomic.Bool
	touched atomic.Bool // Read was called: some of the body may have gone
	once    sync.Once
}

// errBodyEnded is a read of a request body after its exchange ended.
var errBodyEnded = errors.New("forward: the request's exchange ended")

func newH2RequestBody(out *fasthttp.Request, down io.Closer) *h2RequestBody {
	b := &h2RequestBody{down: down}
	switch {
	case out.IsBodyStream():
		b.r, b.n = out.BodyStream(), int64(out.Header.ContentLength())
		if b.n < 0 {
			b.n = -1
		}
	case len(out.Body()) > 0:
		b.r, b.n = bytes.NewReader(out.Body()), int64(len(out.Body()))
	}
	return b
}

func (b *h2RequestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// touched before closed is looked at, and Close the other way round:
	// either Close sees the read and closes the client's body under it,
	// or the read sees Close and does not start.
	b.touched.Store(true)
	if b.closed.Load() {
		return 0, errBodyEnded
	}
	return b.r.Read(p)
}

// Close is the HTTP/2 client's, when the exchange ends before the body
// does, and the leg's at the exchange's end. A body never read is left
// open: the request may be sent again.
func (b *h2RequestBody) Close() error {
	b.closed.Store(true)
	if b.touched.Load() && b.down != nil {
		b.once.Do(func() { b.down.Close() })
	}
	b.mu.Lock() // a read under way returns
	b.mu.Unlock()
	return nil
}

// copyH2Response writes hr's status and fields on resp (not its framing:
// the body's length is set with the body).
func copyH2Response(resp *fasthttp.Response, hr *http.Response) {
	resp.Header.DisableNormalizing()
	resp.Header.SetNoDefaultContentType(true)
	resp.SetStatusCode(hr.StatusCode)
	for k, vs := range hr.Header {
		if k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
}

// h2Body is a backend's response body on a stream. Its end, or its close
// before the end (which resets the stream), gives the stream back and
// ends the request's context; its trailers are read at its end.
type h2Body struct {
	l       *h2Leg
	c       *h2Conn
	hr      *http.Response
	req     *h2RequestBody
	cancel  context.CancelCauseFunc
	once    sync.Once
	trailer http.Header
	eof     bool
}

func (b *h2Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.hr.Body.Read(p)
	if err == io.EOF {
		b.eof = true
		b.end(nil)
	}
	return n, err
}

// end gives the stream back, once: closing a body not read to its end
// resets the stream (RST_STREAM CANCEL), so the backend stops at once.
func (b *h2Body) end(err error) {
	b.once.Do(func() {
		if b.eof || err == nil && b.hr.Body == http.NoBody {
			b.trailer = b.hr.Trailer
		}
		if b.hr.Body != nil {
			b.hr.Body.Close()
		}
		b.req.Close()
		b.cancel(nil)
		b.l.done(b.c)
	})
}

// CloseWithError is fasthttp.ReadCloserWithError's.
func (b *h2Body) CloseWithError(err error) error {
	b.end(err)
	return nil
}

// trailers are the response's trailers, once its body has ended (nil: none).
func (b *h2Body) trailers() http.Header { return b.trailer }
