package h2

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// outSize is how much of a response body a stream buffers before it
// writes DATA: one frame's worth.
const outSize = maxFrameSize

var timeNow = time.Now

var (
	errStreamClosed    = errors.New("h2: stream closed")
	errHandlerDone     = errors.New("h2: ResponseWriter used after the handler returned")
	errTooMuch         = errors.New("h2: handler wrote more than the declared Content-Length")
	errBodyClosed      = http.ErrBodyReadAfterClose
	errWriteAfterClose = errors.New("h2: write after the response ended")
)

// stream is one request and its response. Streams are pooled: one is
// freed when its handler has returned and it has left the connection.
type stream struct {
	c  *conn
	id uint32

	// Under c.mu.
	inMap       bool // among c.streams: open or half closed
	remoteEnded bool // the client's END_STREAM (or trailers) came
	localEnded  bool // our END_STREAM (or a RST_STREAM) is out
	reset       bool // closed by a RST_STREAM, either way, or the connection's end
	resetErr    error
	sendWindow  int64
	recvAvail   int64 // stream window the client may still use
	recvUnsent  int64 // consumed, not yet given back
	declLen     int64 // the request's content-length, -1 if none
	got         int64 // request body bytes received
	body        *requestBody
	wwake       chan struct{} // a writer waiting for a window wakes

	// Set before the handler starts, then the handler's.
	req           *http.Request
	sc            *scope       // the request's ResponseWriter and context
	handler       http.Handler // a stream waiting for its handler goroutine
	isHead        bool
	writeDeadline time.Time
	// runPrev and runNext link the streams whose handler runs (c.running);
	// under c.mu.
	runPrev, runNext *stream

	// What the request is built from, reused by the next stream: the
	// handler's request is a copy of rq (http.Request.WithContext) that
	// points to url and reqHdr, whose values are in vals.
	rq     http.Request
	url    url.URL
	reqHdr http.Header
	vals   []string
	// bodyBuf is the last request body's buffer, for the next: no one
	// reads it once its handler has returned (the handler's end sets it
	// under c.mu, the next request takes it before its stream is shared).
	bodyBuf []byte

	// The response, the handler's goroutine's.
	hdr         http.Header
	status      int
	wroteHeader bool
	headerSent  bool // under c.wmu once the handler runs: the 100-continue writer reads it
	hblock      []byte
	out         []byte
	trailers    []string
	clen        int64 // the response's content-length, -1 if none yet
	written     int64
	done        bool // the handler returned
	connClose   bool // the handler said Connection: close
	// endedByHeaders: the HEADERS written carried END_STREAM.
	endedByHeaders bool
	wtimer         *time.Timer
}

var streamPool = sync.Pool{New: func() any { return &stream{wwake: make(chan struct{}, 1)} }}

func newStream(c *conn, id uint32) *stream {
	st := streamPool.Get().(*stream)
	st.c, st.id = c, id
	st.recvAvail, st.declLen, st.clen = streamRecvWindow, -1, -1
	return st
}

// free gives st back to the pool; nothing may refer to it any more.
func (st *stream) free() {
	h, hb, out, tr, wt, ww := st.hdr, st.hblock[:0], st.out[:0], st.trailers[:0], st.wtimer, st.wwake
	clear(h)
	if len(h) > 64 {
		h = nil
	}
	rh, vals := st.reqHdr, st.vals
	clear(rh)
	if len(rh) > 64 {
		rh = nil
	}
	clear(vals)
	if cap(vals) > 64 {
		vals = nil
	}
	if cap(out) > 4*outSize {
		out = nil
	}
	select {
	case <-ww:
	default:
	}
	*st = stream{hdr: h, hblock: hb, out: out, trailers: tr, wtimer: wt, wwake: ww, reqHdr: rh, vals: vals[:0],
		bodyBuf: st.bodyBuf}
	streamPool.Put(st)
}

// keepBodyBuf keeps the buffer of st's request body, emptied, for the
// next request, if it is small enough; c.mu is held.
func (st *stream) keepBodyBuf(b []byte) {
	if cap(b) > 0 && cap(b) <= maxFrameSize {
		st.bodyBuf = b[:0]
	}
}

func (st *stream) wakeWriter() {
	select {
	case st.wwake <- struct{}{}:
	default:
	}
}

// refundLocked notes n bytes of st's window to give back; c.mu is held.
func (st *stream) refundLocked(n int64) {
	if !st.remoteEnded {
		st.recvUnsent += n
	}
}

// run runs the handler on the stream's goroutine.
func (st *stream) run(h http.Handler) {
	w := &st.sc.w
	defer st.c.handlerDone(st, w)
	didPanic := true
	defer func() {
		if !didPanic {
			return
		}
		e := recover()
		if e != nil && e != http.ErrAbortHandler { //nolint:errorlint // the value itself, as net/http
			const size = 64 << 10
			buf := make([]byte, size)
			buf = buf[:runtime.Stack(buf, false)]
			st.c.srv.logf("http2: panic serving %v: %v\n%s", st.c.remote, e, buf)
		}
		st.resetFromHandler(ErrCodeInternal, errStreamClosed)
	}()
	h.ServeHTTP(w, st.req)
	didPanic = false
	st.finish(w)
}

// finish ends the response after the handler returned.
func (st *stream) finish(w *responseWriter) {
	if !st.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	st.done = true
	st.promoteTrailers()
	c := st.c
	c.mu.Lock()
	ended := st.localEnded
	c.mu.Unlock()
	if ended {
		return
	}
	st.flushOut(st.out, true)
	st.out = st.out[:0]
}

// handlerDone cleans up after the handler: the request body is closed
// (what it held is given back to the connection window), a stream the
// client still sends on is reset, and the next waiting stream starts.
func (c *conn) handlerDone(st *stream, w *responseWriter) {
	w.st = nil
	c.mu.Lock()
	if b := st.body; b != nil {
		if n := len(b.buf) - b.off; n > 0 {
			c.recvUnsent += int64(n)
		}
		st.keepBodyBuf(b.buf)
		b.buf, b.off, b.closed, b.st = nil, 0, true, nil
		b.wakeReader()
	}
	var code ErrCode
	rst := st.inMap && !st.reset
	if rst {
		// Answered before the request ended (§8.1), or a response cut
		// short by a failed write.
		code = ErrCodeNo
		if !st.localEnded {
			code = ErrCodeInternal
		}
		c.closeStreamLocked(st, errStreamClosed)
	}
	c.removeBlockedLocked(st)
	c.handlers--
	c.unlinkRunningLocked(st)
	var next []*stream
	for len(c.pending) > 0 {
		s := c.pending[0]
		c.pending[0] = nil
		c.pending = c.pending[1:]
		if s.reset || c.closed {
			next = append(next, s) // to abandon
			continue
		}
		c.handlers++
		c.hwg.Add(1)
		c.linkRunningLocked(s)
		h := s.handler
		s.handler = nil
		c.spawn(s, h)
		break
	}
	c.mu.Unlock()
	st.sc.ctx.cancel()
	if rst {
		c.lockWrite()
		c.wbuf = appendRSTStream(c.wbuf, st.id, code)
		c.unlockWrite(time.Time{})
	}
	c.sendRefunds(nil, false)
	for _, s := range next {
		s.abandon()
	}
	st.free()
	c.hwg.Done()
}

// abandon frees a stream whose handler never ran.
func (st *stream) abandon() {
	c := st.c
	c.mu.Lock()
	if b := st.body; b != nil {
		if n := len(b.buf) - b.off; n > 0 {
			c.recvUnsent += int64(n)
		}
		st.keepBodyBuf(b.buf)
		b.buf, b.off, b.closed, b.st = nil, 0, true, nil
	}
	if st.inMap {
		c.closeStreamLocked(st, errStreamClosed)
	}
	c.mu.Unlock()
	if st.sc != nil {
		st.sc.w.st = nil
		st.sc.ctx.cancel()
	}
	st.free()
}

// removeBlockedLocked takes st off the list of streams waiting for the
// connection window.
func (c *conn) removeBlockedLocked(st *stream) {
	for i, s := range c.blocked {
		if s == st {
			c.blocked = append(c.blocked[:i], c.blocked[i+1:]...)
			return
		}
	}
}

// resetFromHandler resets the stream from its handler's side.
func (st *stream) resetFromHandler(code ErrCode, err error) {
	c := st.c
	c.mu.Lock()
	if st.reset {
		c.mu.Unlock()
		return
	}
	c.closeStreamLocked(st, err)
	c.mu.Unlock()
	c.lockWrite()
	c.wbuf = appendRSTStream(c.wbuf, st.id, code)
	c.unlockWrite(time.Time{})
}

// writeErr is what a write on a closed stream returns.
func (st *stream) writeErr() error {
	if st.resetErr != nil {
		return st.resetErr
	}
	return errStreamClosed
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

// encodeHeader encodes the response header block from the handler's
// header map as it is now (net/http takes its snapshot at WriteHeader
// too), but for content-length, which is added when the block is sent.
func (st *stream) encodeHeader(code int) []byte {
	b := appendStatus(st.hblock[:0], code)
	hasDate := false
	for k, vv := range st.hdr {
		switch k {
		case "Content-Length":
			if code >= 200 && len(vv) > 0 {
				if n, err := strconv.ParseUint(vv[0], 10, 63); err == nil {
					st.clen = int64(n)
				}
			}
			continue
		case "Date":
			hasDate = true
		case "Connection":
			if code >= 200 && len(vv) > 0 && vv[0] == "close" {
				st.connClose = true
			}
			continue
		case "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade":
			continue
		case "Trailer":
			if code >= 200 {
				for _, v := range vv {
					for _, t := range strings.Split(v, ",") {
						st.declareTrailer(textprotoTrim(t))
					}
				}
			}
		case "Te":
			for _, v := range vv {
				if v == "trailers" {
					b = appendField(b, k, v, false)
				}
			}
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue // Trailer: prefixes among them
		}
		sensitive := k == "Set-Cookie" || k == "Authorization"
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				b = appendField(b, k, v, sensitive)
			}
		}
	}
	if !hasDate && code >= 200 {
		b = appendField(b, "Date", httpDate(), false)
	}
	st.hblock = b
	return b
}

func textprotoTrim(s string) string { return strings.TrimSpace(s) }

func (st *stream) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	for _, t := range st.trailers {
		if t == k {
			return
		}
	}
	st.trailers = append(st.trailers, k)
}

// promoteTrailers declares the trailers set with http.TrailerPrefix.
func (st *stream) promoteTrailers() {
	for k, vv := range st.hdr {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		tk := http.CanonicalHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix))
		st.declareTrailer(tk)
		st.hdr[tk] = vv
	}
}

// trailerBlock encodes the trailers that have values; nil if none.
func (st *stream) trailerBlock() []byte {
	var b []byte
	for _, k := range st.trailers {
		for _, v := range st.hdr[k] {
			if httpguts.ValidHeaderFieldValue(v) {
				b = appendField(b, k, v, false)
			}
		}
	}
	return b
}

// flushOut sends p as the response body so far (HEADERS first if not yet
// sent); end ends the stream, with the trailers if any.
func (st *stream) flushOut(p []byte, end bool) error {
	c := st.c
	if !st.headerSent && st.done && st.clen < 0 && bodyAllowed(st.status) && (st.written > 0 || !st.isHead) {
		st.clen = st.written // the whole body is known: say its length
	}
	if st.isHead {
		p = nil
		end = true
	}
	var trailers []byte
	if end {
		trailers = st.trailerBlock()
	}
	if dl := st.writeDeadline; !dl.IsZero() && !timeNow().Before(dl) {
		st.resetFromHandler(ErrCodeInternal, os.ErrDeadlineExceeded)
		return os.ErrDeadlineExceeded
	}
	for {
		n, err := st.reserve(len(p))
		if err != nil {
			return err
		}
		last := n == len(p)
		c.lockWrite()
		c.mu.Lock()
		if st.reset || st.localEnded {
			err := st.writeErr()
			if !st.reset {
				err = errWriteAfterClose
			}
			c.mu.Unlock()
			c.unlockWrite(time.Time{}) // what others left for it to flush
			return err
		}
		c.mu.Unlock()
		frame := c.peerFrameSize()
		endHere := end && last
		if !st.headerSent {
			if st.connClose {
				// Connection: close: the client learns that the connection
				// takes no new stream before it reads this response, as
				// from net/http (which sends the GOAWAY first too).
				c.goAwayLocked()
			}
			st.appendHeaders(endHere && n == 0 && trailers == nil, frame)
		}
		if n > 0 || endHere && trailers == nil && !st.endedByHeaders {
			flags := uint8(0)
			if endHere && trailers == nil {
				flags = flagEndStream
			}
			c.wbuf = appendFrameHeader(c.wbuf, n, frameData, flags, st.id)
			c.wbuf = append(c.wbuf, p[:n]...)
		}
		if endHere && trailers != nil {
			c.wbuf = appendHeaderBlock(c.wbuf, st.id, trailers, true, frame)
		}
		if endHere || st.isHead {
			c.mu.Lock()
			st.localEnded = true
			if st.remoteEnded {
				c.removeStreamLocked(st)
			}
			c.mu.Unlock()
		}
		err = c.unlockWrite(st.writeDeadline)
		if err != nil {
			return err
		}
		p = p[n:]
		if last {
			return nil
		}
	}
}

// appendHeaders appends the response's HEADERS; c.wmu is held.
func (st *stream) appendHeaders(end bool, frame int) {
	c := st.c
	block := st.hblock
	if st.clen >= 0 && bodyAllowed(st.status) {
		var num [20]byte
		block = appendField(block, "Content-Length", string(strconv.AppendInt(num[:0], st.clen, 10)), false)
		st.hblock = block
	}
	c.wbuf = appendHeaderBlock(c.wbuf, st.id, block, end, frame)
	st.headerSent = true
	st.endedByHeaders = end
}

func (c *conn) peerFrameSize() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerFrame
}

// reserve takes up to want bytes of the send windows, waiting (until the
// write deadline) while they are closed; the HEADERS go out before a wait.
func (st *stream) reserve(want int) (int, error) {
	if want == 0 {
		return 0, nil
	}
	c := st.c
	c.mu.Lock()
	for {
		if st.reset {
			err := st.writeErr()
			c.mu.Unlock()
			return 0, err
		}
		if avail := min(c.sendWindow, st.sendWindow, int64(c.peerFrame)); avail > 0 {
			n := min(int64(want), avail)
			c.sendWindow -= n
			st.sendWindow -= n
			c.mu.Unlock()
			return int(n), nil
		}
		if c.sendWindow <= 0 {
			c.blocked = append(c.blocked, st)
		}
		c.mu.Unlock()
		if !st.headerSent {
			if err := st.sendHeadersOnly(); err != nil {
				return 0, err
			}
		}
		if err := st.waitWindow(); err != nil {
			c.mu.Lock()
			c.removeBlockedLocked(st)
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Lock()
		c.removeBlockedLocked(st)
	}
}

// sendHeadersOnly writes the HEADERS before the body waits for a window.
func (st *stream) sendHeadersOnly() error {
	c := st.c
	c.lockWrite()
	c.mu.Lock()
	if st.reset {
		err := st.writeErr()
		c.mu.Unlock()
		c.unlockWrite(time.Time{}) // what others left for it to flush
		return err
	}
	c.mu.Unlock()
	if st.connClose {
		c.goAwayLocked()
	}
	st.appendHeaders(false, c.peerFrameSize())
	return c.unlockWrite(st.writeDeadline)
}

// waitWindow waits for a WINDOW_UPDATE (or SETTINGS) that may open a
// window, the stream's end, or its write deadline.
func (st *stream) waitWindow() error {
	if !waitWake(st.wwake, &st.wtimer, st.writeDeadline) {
		st.resetFromHandler(ErrCodeInternal, os.ErrDeadlineExceeded)
		return os.ErrDeadlineExceeded
	}
	return nil
}

// waitWake waits for wake until dl (zero: none), with *t as its timer
// (made on first use, kept for the next wait). It reports false if dl
// passed first, or had passed already.
func waitWake(wake <-chan struct{}, t **time.Timer, dl time.Time) bool {
	if dl.IsZero() {
		<-wake
		return true
	}
	d := dl.Sub(timeNow())
	if d <= 0 {
		return false
	}
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case <-wake:
		(*t).Stop()
		return true
	case <-(*t).C:
		return false
	}
}

// write1xx sends an informational response at once.
func (st *stream) write1xx(code int) {
	block := st.encodeHeader(code)
	c := st.c
	c.lockWrite()
	c.mu.Lock()
	ok := !st.reset && !st.localEnded
	c.mu.Unlock()
	if ok {
		c.wbuf = appendHeaderBlock(c.wbuf, st.id, block, false, c.peerFrameSize())
	}
	c.unlockWrite(st.writeDeadline)
}

// responseWriter is the handler's http.ResponseWriter.
type responseWriter struct {
	st *stream // nil once the handler returned
}

var (
	_ http.ResponseWriter = (*responseWriter)(nil)
	_ http.Flusher        = (*responseWriter)(nil)
)

func (w *responseWriter) Header() http.Header {
	st := w.st
	if st == nil {
		return http.Header{}
	}
	if st.hdr == nil {
		st.hdr = make(http.Header)
	}
	return st.hdr
}

func (w *responseWriter) WriteHeader(code int) {
	st := w.st
	if st == nil || st.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if st.hdr == nil {
		st.hdr = make(http.Header)
	}
	if code >= 100 && code <= 199 {
		if code != http.StatusSwitchingProtocols {
			st.write1xx(code)
		}
		return
	}
	st.wroteHeader, st.status = true, code
	st.encodeHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	st := w.st
	if st == nil {
		return 0, errHandlerDone
	}
	if !st.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(st.status) {
		return 0, http.ErrBodyNotAllowed
	}
	st.written += int64(len(p))
	if st.clen >= 0 && st.written > st.clen {
		return 0, errTooMuch
	}
	if st.isHead {
		return len(p), nil
	}
	if len(st.out)+len(p) <= outSize {
		if st.out == nil {
			st.out = make([]byte, 0, outSize)
		}
		st.out = append(st.out, p...)
		return len(p), nil
	}
	if len(st.out) > 0 {
		if err := st.flushOut(st.out, false); err != nil {
			return 0, err
		}
		st.out = st.out[:0]
	}
	if len(p) > outSize {
		if err := st.flushOut(p, false); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if st.out == nil {
		st.out = make([]byte, 0, outSize)
	}
	st.out = append(st.out, p...)
	return len(p), nil
}

func (w *responseWriter) WriteString(s string) (int, error) {
	st := w.st
	if st != nil && len(st.out)+len(s) <= outSize && st.wroteHeader && bodyAllowed(st.status) && !st.isHead &&
		(st.clen < 0 || st.written+int64(len(s)) <= st.clen) {
		if st.out == nil {
			st.out = make([]byte, 0, outSize)
		}
		st.written += int64(len(s))
		st.out = append(st.out, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// RefuseStream resets the stream with REFUSED_STREAM: RFC 9113 §8.7's
// word that the request was not processed, which a client may send again
// on another connection by itself (Go's and browsers' do), unlike an
// answer. It reports false, doing nothing, once the head is written; the
// handler then returns, and writes nothing more.
func (w *responseWriter) RefuseStream() bool {
	st := w.st
	if st == nil || st.wroteHeader {
		return false
	}
	st.wroteHeader = true // the stream is reset: finish writes no head for it
	st.resetFromHandler(ErrCodeRefusedStream, errStreamClosed)
	return true
}

func (w *responseWriter) Flush() { w.FlushError() }

// FlushError sends the headers and what is buffered of the body.
func (w *responseWriter) FlushError() error {
	st := w.st
	if st == nil {
		return errHandlerDone
	}
	if !st.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	c := st.c
	c.mu.Lock()
	ended := st.localEnded
	c.mu.Unlock()
	if ended {
		if st.isHead {
			return nil
		}
		return st.writeErr()
	}
	err := st.flushOut(st.out, false)
	st.out = st.out[:0]
	return err
}

// SetReadDeadline bounds the reads of the request body (from now on).
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	st := w.st
	if st == nil {
		return errHandlerDone
	}
	c := st.c
	c.mu.Lock()
	if b := st.body; b != nil {
		b.deadline = t
		b.wakeReader()
	}
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline bounds the writes of the response.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	st := w.st
	if st == nil {
		return errHandlerDone
	}
	st.writeDeadline = t
	return nil
}

// requestBody is a request's body: what DATA frames brought, read by the
// handler (or whoever it hands the body to).
type requestBody struct {
	c  *conn
	st *stream // nil once the handler returned; under c.mu

	// Under c.mu.
	buf           []byte
	off           int
	err           error // io.EOF after the END_STREAM; why the stream ended
	closed        bool
	needsContinue bool
	deadline      time.Time
	trailer       http.Header // received

	reqTrailer http.Header   // the request's Trailer, declared keys
	wake       chan struct{} // made on the reader's first wait; under c.mu
	timer      *time.Timer
}

func (b *requestBody) wakeReader() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *requestBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c := b.c
	c.mu.Lock()
	for {
		if b.closed {
			c.mu.Unlock()
			return 0, errBodyClosed
		}
		if len(b.buf)-b.off > 0 {
			n := copy(p, b.buf[b.off:])
			b.off += n
			if b.off == len(b.buf) {
				b.buf, b.off = b.buf[:0], 0
			}
			c.recvUnsent += int64(n)
			st := b.st
			if st != nil {
				st.refundLocked(int64(n))
			}
			c.mu.Unlock()
			c.sendBodyRefunds(b)
			return n, nil
		}
		if b.err != nil {
			err := b.err
			if err == io.EOF && b.trailer != nil && b.reqTrailer != nil {
				for k := range b.reqTrailer {
					if v, ok := b.trailer[k]; ok {
						b.reqTrailer[k] = v
					}
				}
				b.trailer = nil
			}
			c.mu.Unlock()
			if err != io.EOF {
				err = b.readErr(err)
			}
			return 0, err
		}
		if b.needsContinue {
			b.needsContinue = false
			c.mu.Unlock()
			b.write100()
			c.mu.Lock()
			continue
		}
		dl := b.deadline
		if b.wake == nil {
			// Made by the reader, under c.mu, before its first wait: a
			// body that came before it is read needs none.
			b.wake = make(chan struct{}, 1)
		}
		c.mu.Unlock()
		if !dl.IsZero() && !timeNow().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		// Woken or timed out, the loop looks again: bytes that came with
		// the deadline are read, and the next turn returns its error.
		waitWake(b.wake, &b.timer, dl)
		c.mu.Lock()
	}
}

// readErr is what a read of a body whose stream ended with err returns.
func (b *requestBody) readErr(err error) error {
	var se streamError
	if errors.As(err, &se) {
		return errors.New("h2: request body: stream error " + se.code.String())
	}
	return err
}

// sendBodyRefunds gives back the windows a read consumed. b.st is read
// under c.mu: the stream's update goes out only while it is still the
// connection's.
func (c *conn) sendBodyRefunds(b *requestBody) {
	c.mu.Lock()
	connIncr, stIncr, id := c.takeRefundsLocked(b.st)
	c.mu.Unlock()
	c.writeRefunds(connIncr, stIncr, id, false)
}

// write100 sends 100 Continue, unless the response has begun.
func (b *requestBody) write100() {
	c := b.c
	c.lockWrite()
	c.mu.Lock()
	st := b.st
	ok := st != nil && !st.reset && !st.localEnded && !st.headerSent
	var id uint32
	if ok {
		id = st.id
	}
	c.mu.Unlock()
	if ok {
		c.wbuf = appendHeaderBlock(c.wbuf, id, []byte{0x08, 3, '1', '0', '0'}, false, maxFrameSize)
	}
	c.unlockWrite(time.Time{})
}

// Close ends reading: what is buffered, and what comes later, is given
// back to the connection window.
func (b *requestBody) Close() error {
	c := b.c
	c.mu.Lock()
	if !b.closed {
		if n := len(b.buf) - b.off; n > 0 {
			c.recvUnsent += int64(n)
		}
		b.buf, b.off, b.closed = nil, 0, true
		b.wakeReader()
	}
	c.mu.Unlock()
	c.sendRefunds(nil, false)
	return nil
}

// httpDate is the Date header's value, made once a second.
func httpDate() string {
	now := timeNow()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateValue{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

type dateValue struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[dateValue]
