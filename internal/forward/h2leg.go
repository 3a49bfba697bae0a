package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/h2"
)

// h2Leg is the HTTP/2 leg of one backend's pool (apps.NAME.upstream.protocol
// h2c or h2): its requests are streams of a few connections, each levee's
// own h2.ClientConn over a connection dialled within the pool's dial
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
// new one, within the budget. Flow control is h2.ClientConn's: each
// stream's window (256 KiB) bounds what a slow reader leaves buffered, and
// the connection's window is given back as data arrives, so a slow reader
// stalls its own stream, never the connection.
//
// A request's goroutine writes its own HEADERS (and a body that fits the
// windows) and waits for its head; only a body that streams has a
// goroutine of its own, which writes it. Each ClientConn runs one read
// loop until the connection closes.
type h2Leg struct {
	addr     string
	scheme   string      // "http" (h2c) or "https" (h2)
	tls      *tls.Config // nil: h2c
	idle     time.Duration
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
	cc      *h2.ClientConn
	streams int // levee's requests on it now; under h2Leg.mu
}

// newH2Leg is the HTTP/2 leg to addr under the pool settings u and the
// app's upstream a (whose TLS validation loaded), dialling through d.
func newH2Leg(addr string, u config.Upstream, a config.AppUpstream, d *fastDialer) *h2Leg {
	l := &h2Leg{addr: addr, scheme: "http", dialer: d, maxConns: u.MaxConnsPerBackend,
		wait: u.ResponseHeaderTimeout.D(), idle: u.IdleTimeout.D(), changed: make(chan struct{})}
	if a.Protocol == config.ProtocolH2 {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		l.scheme, l.tls = "https", a.TLS.Config(host)
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
		// At the bound with every stream taken, or a dial under way: wait
		// for a stream to end or the dial to finish. The backend's stream
		// limit is waited for here, never exceeded.
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
		if !c.cc.Usable() {
			// Draining: its streams finish on it; it takes no new one.
			l.conns = append(l.conns[:i], l.conns[i+1:]...)
			continue
		}
		if c.streams < min(c.cc.MaxStreams(), maxStreamsPerConn) {
			return c
		}
		i++
	}
	return nil
}

// maxStreamsPerConn bounds the streams levee opens on one connection to
// a backend that sets a higher limit, or none.
const maxStreamsPerConn = 1000

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
	var nc net.Conn = newH2Socket(bc, l.wait)
	if l.tls != nil {
		hctx, cancel := context.WithTimeout(ctx, l.dialer.d.Timeout)
		nc, err = h2.ClientTLS(hctx, nc, l.tls)
		cancel()
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: bc.RemoteAddr(), Err: err}
		}
	}
	// NewClientConn waits for the backend's SETTINGS: the connection's
	// stream limit is the backend's, not a guess that would send streams
	// the backend refuses.
	cc, err := h2.NewClientConn(nc, h2.ClientOptions{IdleTimeout: l.idle, SettingsTimeout: l.dialer.d.Timeout})
	if err != nil {
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
		c.cc.Shutdown()
	}
}

// legCall is what one try of a request carries to its leg beside the
// request: the context whose end aborts it (nil: none), and the client's
// body, closed to end a read the leg waits on when the exchange ends
// first (nil: none to close).
type legCall struct {
	watched context.Context
	body    io.Closer
	sent    *sentCall // HTTP/1.1: the request is written (LoopCall)
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
	var stop <-chan struct{}
	if call.watched != nil {
		stop = call.watched.Done()
	}
	for try := 1; ; try++ {
		// One allocation for the try: the response body that gives the
		// stream back, and the request body it closes.
		b := &h2Body{l: l}
		b.req.init(out, call.body)
		err := l.try(out, b, resp, stop, call.watched)
		if err == nil || try == maxUnprocessed || !errors.Is(err, h2.ErrUnprocessed) || b.req.touched.Load() {
			return err
		}
	}
}

func (l *h2Leg) try(out *fasthttp.Request, b *h2Body, resp *fasthttp.Response, stop <-chan struct{}, watched context.Context) error {
	body := &b.req
	ctx := watched
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := l.take(ctx)
	if err != nil {
		return err
	}
	bp := blocks.Get().(*[]byte)
	block, err := l.encode((*bp)[:0], out)
	if err != nil {
		blocks.Put(bp)
		l.done(c)
		return err
	}
	// A body in memory goes with the head, as much of it as the windows
	// take; the rest, or a body that streams, from a goroutine of its own.
	var data []byte
	if !out.IsBodyStream() {
		data = out.Body()
	}
	noBody := body.r == nil
	l.dialer.stats.exchanges.Add(1)
	st, sent, err := c.cc.Start(block, data, noBody || data != nil, isHead(out), stop)
	*bp = block
	blocks.Put(bp)
	if err != nil {
		l.done(c)
		return err
	}
	if !noBody && (data == nil || sent < len(data)) {
		if data != nil {
			body.skip(sent)
		}
		go sendBody(st, body)
	}
	status, fields, err := st.Head(l.wait)
	if err != nil {
		if err == h2.ErrHeadTimeout {
			err = errHeadTimeout
		} else if watched != nil && watched.Err() != nil {
			err = watched.Err()
		}
		st.Close()
		body.Close()
		l.done(c)
		return err
	}
	copyH2Response(resp, status, fields)
	b.c, b.st = c, st
	if !st.HasBody() {
		b.eof = true
		b.end(nil) // a head without a body: its trailers, if any, are in the head
		resp.Header.SetContentLength(0)
		return nil
	}
	resp.SetBodyStream(b, int(st.ContentLength())) // -1: to its end
	return nil
}

// blocks recycle the buffers requests' header blocks are encoded in.
var blocks = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// isHead reports a HEAD request, whose response has no body.
func isHead(out *fasthttp.Request) bool { return string(out.Header.Method()) == "HEAD" }

// encode appends out's header block to b: the method, the target as sent,
// Host as :authority, and the fields copyHead chose.
func (l *h2Leg) encode(b []byte, out *fasthttp.Request) ([]byte, error) {
	h := &out.Header
	b = h2.AppendRequestHead(b, h.Method(), []byte(l.scheme), h.Host(), h.RequestURI())
	for k, v := range h.All() {
		if !h2PassesField(k) || ascii.EqualFold(k, "Te") && !ascii.EqualFold(v, "trailers") {
			continue
		}
		var ok bool
		if b, ok = h2.AppendRequestField(b, k, v); !ok {
			return b, errBadField
		}
	}
	return b, nil
}

// errBadField is a request field HTTP/2 cannot carry (the parsers let
// none through; this is the last guard before the backend).
var errBadField = errors.New("forward: a request field HTTP/2 cannot carry")

// sendBody writes the request body that did not go with the head, on
// its own goroutine: the response may come (and end) before the body
// does. A body that fails resets the stream, so the backend never takes
// a cut body for a whole one; the exchange's end (h2RequestBody.Close)
// ends a read waiting on the client.
func sendBody(st *h2.ClientStream, body *h2RequestBody) {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := (*bp)[:16<<10]
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if werr := st.Write(buf[:n], false); werr != nil {
				body.Close()
				return
			}
		}
		if err == io.EOF {
			st.Write(nil, true)
			return
		}
		if err != nil {
			st.Abort(err)
			return
		}
	}
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

// init makes b the body of out, whose client's body is down (nil: none
// to close).
func (b *h2RequestBody) init(out *fasthttp.Request, down io.Closer) {
	b.down = down
	switch {
	case out.IsBodyStream():
		b.r, b.n = out.BodyStream(), int64(out.Header.ContentLength())
		if b.n < 0 {
			b.n = -1
		}
	case len(out.Body()) > 0:
		b.r, b.n = bytes.NewReader(out.Body()), int64(len(out.Body()))
	}
}

// skip passes over the first n bytes of a body in memory: they went
// with the head.
func (b *h2RequestBody) skip(n int) {
	if r, ok := b.r.(*bytes.Reader); ok {
		r.Seek(int64(n), io.SeekStart)
	}
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

// copyH2Response writes the backend's status and fields on resp (not its
// framing: the body's length is set with the body). The names are
// HTTP/2's, lower case; an HTTP/1.1 client reads them as any case.
func copyH2Response(resp *fasthttp.Response, status int, fields []hpack.HeaderField) {
	resp.Header.DisableNormalizing()
	resp.Header.SetNoDefaultContentType(true)
	resp.SetStatusCode(status)
	for _, f := range fields {
		if f.Name[0] == ':' || f.Name == "content-length" {
			continue
		}
		resp.Header.Add(f.Name, f.Value)
	}
}

// h2Body is a backend's response body on a stream. Its end, or its close
// before the end (which resets the stream), gives the stream back; its
// trailers are read at its end.
type h2Body struct {
	l       *h2Leg
	c       *h2Conn
	st      *h2.ClientStream
	req     h2RequestBody
	once    sync.Once
	trailer http.Header
	eof     bool
}

func (b *h2Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.st.Read(p)
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
		if b.eof && err == nil {
			if t := b.st.Trailers(); len(t) > 0 {
				b.trailer = make(http.Header, len(t))
				for _, f := range t {
					k := http.CanonicalHeaderKey(f.Name)
					b.trailer[k] = append(b.trailer[k], f.Value)
				}
			}
		}
		b.st.Close()
		b.req.Close()
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
