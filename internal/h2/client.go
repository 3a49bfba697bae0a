package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/leveeproxy/levee/internal/ascii"
	"golang.org/x/net/http2/hpack"
)

// The client side: ClientConn is one connection to a backend, the HTTP/2
// upstream leg's. Its design follows the server's: the goroutine of a
// request writes its own frames (HEADERS, and a body that fits the
// windows) into the connection's buffer under a write lock, with no
// goroutine per request; one goroutine per connection reads frames and
// hands each stream what arrived (its head, its body's bytes, its
// trailers), answering what the protocol asks (SETTINGS and PING
// acknowledgements, the connection's WINDOW_UPDATE).
//
// The backend is a tenant's code, so its frames are checked as a
// client's are on the server side: a frame that breaks the protocol ends
// the connection (GOAWAY), a malformed response resets its stream
// (RST_STREAM PROTOCOL_ERROR) and fails the request, and no response
// field that could not be written back to an HTTP/1.1 client as it came
// (a name that is not a lower-case token, a value with NUL, CR or LF)
// ever reaches one. What a backend can make levee hold is bounded: a
// stream's unread body by its window (clientStreamWindow), a header list
// by MaxHeaderList, control frames by a budget that grows with the
// streams opened (clientCalm).

const (
	// clientStreamWindow is each stream's receive window: the most of a
	// response body levee holds unread. The connection's window is given
	// back as data arrives, so one slow stream never stalls the others;
	// the streams' windows bound the memory.
	clientStreamWindow = 256 << 10
	clientConnWindow   = 16 << 20
	// clientReadBuf is the reader's buffer: a whole frame of the default
	// size and its header, so that a frame is handled in place.
	clientReadBuf = 32 << 10
	// defaultMaxHeaderList bounds a response's header list (and its
	// trailers') when ClientOptions leaves it unset.
	defaultMaxHeaderList = 64 << 10
	// maxInformational bounds the 1xx heads before a stream's final one.
	maxInformational = 8
	// clientCalm is the budget of control frames (PING, SETTINGS,
	// PRIORITY, empty DATA, 1xx heads, frames of unknown types) a backend
	// may send before it is told ENHANCE_YOUR_CALM; each stream opened
	// adds clientCalmPerStream, up to clientCalm.
	clientCalm          = 10000
	clientCalmPerStream = 100
	// unlimitedStreams stands for a backend that sets no stream limit.
	unlimitedStreams = 1 << 31
)

// ErrUnprocessed is a request the backend did not process: it refused its
// stream (REFUSED_STREAM), its GOAWAY left the stream out, or the
// connection could take no new stream. It is safe to send again, whatever
// its method (RFC 9113 §8.7).
var ErrUnprocessed = errors.New("h2: the backend did not process the request")

// ErrHeadTimeout is a response head that did not come within the wait.
var ErrHeadTimeout = timeoutError("h2: no response head within the wait")

type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return false } // net.Error's

// StreamError is a stream that ended in a reset: the backend's
// RST_STREAM (Remote), or levee's for a malformed response.
type StreamError struct {
	Code   ErrCode
	Remote bool
	Reason string // levee's reason, when it reset the stream
}

func (e *StreamError) Error() string {
	if e.Remote {
		return "h2: the backend reset the stream: " + e.Code.String()
	}
	return "h2: malformed response from the backend (" + e.Reason + "): stream reset " + e.Code.String()
}

// Unwrap makes a REFUSED_STREAM an ErrUnprocessed.
func (e *StreamError) Unwrap() error {
	if e.Remote && e.Code == ErrCodeRefusedStream {
		return ErrUnprocessed
	}
	return nil
}

// ConnError is a connection that ended: on a protocol error (levee's
// GOAWAY with Code), on the backend's GOAWAY for an error, or on a
// failed read or write (Err).
type ConnError struct {
	Code   ErrCode
	Remote bool // the backend's GOAWAY
	Reason string
	Err    error
}

func (e *ConnError) Error() string {
	switch {
	case e.Err != nil:
		return "h2: backend connection: " + e.Err.Error()
	case e.Remote:
		return "h2: the backend went away: " + e.Code.String()
	}
	return "h2: the backend broke the protocol (" + e.Reason + "): " + e.Code.String()
}

func (e *ConnError) Unwrap() error { return e.Err }

// ClientOptions are a ClientConn's settings.
type ClientOptions struct {
	// MaxHeaderList bounds a response's header list, and its trailers'
	// (SETTINGS_MAX_HEADER_LIST_SIZE); 0 is 64 KiB.
	MaxHeaderList uint32
	// IdleTimeout closes the connection once it has had no stream for
	// this long; 0 never does.
	IdleTimeout time.Duration
	// SettingsTimeout bounds NewClientConn's wait for the backend's
	// SETTINGS; 0 is 10 s.
	SettingsTimeout time.Duration
}

// ClientConn is an HTTP/2 connection to a backend. Start opens a stream
// on it; Usable and MaxStreams tell whether it takes one. Safe for
// concurrent use.
type ClientConn struct {
	nc       net.Conn
	maxHList uint32
	idle     time.Duration

	// The reader's alone.
	br      *bufio.Reader
	hdec    *hpack.Decoder
	hb      clientBlock
	scratch []byte

	calm    atomic.Int64
	settled chan struct{} // closed at the backend's first SETTINGS
	done    chan struct{} // closed when the reader has returned

	mu         sync.Mutex
	streams    map[uint32]*ClientStream // open on the wire
	nextID     uint32
	open       int // streams started and not yet closed by their owner
	maxStreams uint32
	sendWindow int64
	peerWindow int64
	peerFrame  int
	recvAvail  int64 // connection window the backend may still use
	recvUnsent int64 // received, not yet given back
	unacked    int   // our SETTINGS not yet acknowledged
	goAway     bool  // the backend's GOAWAY came: no new streams
	draining   bool  // Shutdown: no new streams, close once none is open
	closed     bool  // no new streams, ever
	err        error // why the connection ended
	idleTimer  *time.Timer

	wmu  sync.Mutex
	wbuf []byte
	werr error
}

// clientBlock is a header block being read.
type clientBlock struct {
	active     bool
	st         *ClientStream // nil: a closed stream's, decoded and dropped
	id         uint32
	endStream  bool
	trailers   bool
	fields     []hpack.HeaderField
	remain     uint32
	tooLarge   bool
	invalid    string // why a field is malformed
	sawRegular bool
	status     int
	bytes      int
}

// NewClientConn starts HTTP/2 on nc, a connection whose protocol is
// settled (h2c prior knowledge, or ALPN h2): it sends the preface and
// waits for the backend's SETTINGS. The ClientConn owns nc from then on,
// and one goroutine that reads it until Close.
func NewClientConn(nc net.Conn, o ClientOptions) (*ClientConn, error) {
	cc := &ClientConn{nc: nc, maxHList: o.MaxHeaderList, idle: o.IdleTimeout,
		settled: make(chan struct{}), done: make(chan struct{}),
		streams: map[uint32]*ClientStream{}, nextID: 1, maxStreams: unlimitedStreams,
		sendWindow: defaultWindow, peerWindow: defaultWindow, peerFrame: maxFrameSize,
		recvAvail: clientConnWindow, unacked: 1}
	if cc.maxHList == 0 {
		cc.maxHList = defaultMaxHeaderList
	}
	cc.calm.Store(clientCalm)
	wait := o.SettingsTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	b := append(make([]byte, 0, 64), clientPreface...)
	b = appendFrameHeader(b, 3*6, frameSettings, 0, 0)
	b = appendSetting(b, settingEnablePush, 0)
	b = appendSetting(b, settingInitialWindowSize, clientStreamWindow)
	b = appendSetting(b, settingMaxHeaderListSize, cc.maxHList)
	cc.wbuf = appendWindowUpdate(b, 0, clientConnWindow-defaultWindow)
	cc.wmu.Lock()
	if err := cc.unlockWrite(); err != nil {
		nc.Close()
		return nil, err
	}
	cc.br = bufio.NewReaderSize(nc, clientReadBuf)
	cc.hdec = hpack.NewDecoder(4096, cc.emit)
	// A string over the header list's bound is decoded, to be refused
	// with its stream alone (emit): the decoder's own refusal would leave
	// the connection's table behind the backend's.
	cc.hdec.SetMaxStringLength(2 * int(cc.maxHList))
	go cc.readLoop()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-cc.settled:
		return cc, nil
	case <-cc.done:
		cc.mu.Lock()
		err := cc.err
		cc.mu.Unlock()
		return nil, err
	case <-t.C:
		cc.Close()
		return nil, timeoutError("h2: no SETTINGS from the backend within " + wait.String())
	}
}

// ClientTLS is the TLS client handshake of an h2 leg on nc, within ctx:
// the backend must pick h2 by ALPN (cfg offers it), as RFC 9113 §3.2
// asks of HTTP/2 over TLS. On an error nc is closed.
func ClientTLS(ctx context.Context, nc net.Conn, cfg *tls.Config) (net.Conn, error) {
	tc := tls.Client(nc, cfg)
	err := tc.HandshakeContext(ctx)
	if err == nil && tc.ConnectionState().NegotiatedProtocol != "h2" {
		err = errors.New("h2: the backend did not negotiate h2 by ALPN")
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}

// Usable reports whether the connection takes new streams.
func (cc *ClientConn) Usable() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return !cc.closed && !cc.goAway && !cc.draining
}

// MaxStreams is the backend's SETTINGS_MAX_CONCURRENT_STREAMS (1<<31:
// none set).
func (cc *ClientConn) MaxStreams() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return int(cc.maxStreams)
}

// Shutdown takes no new stream and closes the connection once its
// streams are closed (at once if it has none).
func (cc *ClientConn) Shutdown() {
	cc.mu.Lock()
	cc.draining = true
	idle := cc.open == 0
	cc.mu.Unlock()
	if idle {
		cc.goAwayAndClose()
	}
}

// Close closes the connection now: its streams fail. It returns once the
// reader has.
func (cc *ClientConn) Close() error {
	cc.goAwayAndClose()
	<-cc.done
	return nil
}

// goAwayAndClose says GOAWAY (no error) and closes, without waiting for
// the reader: safe from the reader itself.
func (cc *ClientConn) goAwayAndClose() {
	cc.mu.Lock()
	was := cc.closed
	cc.closed = true
	cc.mu.Unlock()
	if !was {
		cc.wmu.Lock()
		cc.wbuf = appendGoAway(cc.wbuf, 0, ErrCodeNo)
		cc.unlockWrite()
	}
	cc.nc.Close()
}

// unlockWrite writes the buffer and releases the write lock.
func (cc *ClientConn) unlockWrite() error {
	if cc.werr == nil && len(cc.wbuf) > 0 {
		if _, err := cc.nc.Write(cc.wbuf); err != nil {
			cc.werr = err
		}
	}
	err := cc.werr
	cc.wbuf = cc.wbuf[:0]
	if cap(cc.wbuf) > 64<<10 {
		cc.wbuf = nil
	}
	cc.wmu.Unlock()
	if err != nil {
		cc.nc.Close() // the reader ends, and with it every stream
	}
	return err
}

// ClientStream is one request's stream. Its owner reads the head (Head),
// the body (Read) and the trailers (Trailers), writes the request body
// (Write) from at most one goroutine at a time, and must Close it.
type ClientStream struct {
	cc   *ClientConn
	id   uint32
	stop <-chan struct{} // the request's end: waits give up
	head bool            // a HEAD request: no body in the response
	wake chan struct{}   // the reader of the response: something arrived
	room chan struct{}   // the writer of the request body: window, or an end (nil: no body)

	// Under cc.mu.
	sendWindow  int64
	recvAvail   int64 // stream window the backend may still use
	recvUnsent  int64 // read by the owner, not yet given back
	buf         []byte
	off         int
	status      int
	fields      []hpack.HeaderField
	fieldsArr   [8]hpack.HeaderField // fields' own, for a head of a few
	trailers    []hpack.HeaderField
	informed    int
	declLen     int64 // content-length, -1 none
	got         int64
	noBody      bool // the response can have no body (HEAD, 204, 304)
	headDone    bool
	remoteEnded bool
	localEnded  bool
	onWire      bool // in cc.streams
	closed      bool // Close was called
	err         error
}

// Start opens a stream with the request's header block (encoded with
// AppendRequestHead and AppendRequestField) and as much of data as the
// windows take at once, ending the request there when end is set and
// all of data went. It reports how much of data went; the rest, and a
// body that streams, go with Write. stop ends the stream's waits (the
// request's end). A stream that could not start is an ErrUnprocessed.
func (cc *ClientConn) Start(block, data []byte, end, head bool, stop <-chan struct{}) (*ClientStream, int, error) {
	st := &ClientStream{cc: cc, stop: stop, head: head, wake: make(chan struct{}, 1),
		recvAvail: clientStreamWindow, declLen: -1}
	if !end || len(data) > 0 {
		st.room = make(chan struct{}, 1) // a body to write: its waits for the windows
	}
	cc.wmu.Lock()
	cc.mu.Lock()
	if cc.closed || cc.goAway || cc.draining || cc.nextID > 1<<31-1 {
		err := cc.err
		cc.mu.Unlock()
		cc.wmu.Unlock()
		if err == nil {
			err = errors.New("h2: the connection takes no new stream")
		}
		return nil, 0, errors.Join(ErrUnprocessed, err)
	}
	st.id = cc.nextID
	cc.nextID += 2
	st.sendWindow = cc.peerWindow
	st.onWire = true
	cc.streams[st.id] = st
	cc.open++
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
	}
	n := min(len(data), int(max(0, min(st.sendWindow, cc.sendWindow))))
	st.sendWindow -= int64(n)
	cc.sendWindow -= int64(n)
	st.localEnded = end && n == len(data)
	frame := cc.peerFrame
	cc.mu.Unlock()
	if c := cc.calm.Add(clientCalmPerStream); c > clientCalm {
		cc.calm.Store(clientCalm)
	}
	cc.wbuf = appendHeaderBlock(cc.wbuf, st.id, block, end && len(data) == 0, frame)
	if len(data) > 0 {
		cc.wbuf = appendData(cc.wbuf, st.id, data[:n], st.localEnded, frame)
	}
	if err := cc.unlockWrite(); err != nil {
		// The write failed before these bytes (a connection writes in
		// order): none reached the backend.
		st.Close()
		return nil, 0, errors.Join(ErrUnprocessed, err)
	}
	return st, n, nil
}

// appendData appends p as DATA frames of at most frame bytes, the last
// with END_STREAM when end is set (an empty p: one empty frame).
func appendData(b []byte, id uint32, p []byte, end bool, frame int) []byte {
	for {
		n := min(len(p), frame)
		flags := uint8(0)
		if end && n == len(p) {
			flags = flagEndStream
		}
		b = appendFrameHeader(b, n, frameData, flags, id)
		b = append(b, p[:n]...)
		p = p[n:]
		if len(p) == 0 {
			return b
		}
	}
}

// errStreamDone is a write or read on a stream its owner closed.
var errStreamDone = errors.New("h2: the stream is closed")

// Write sends p as the request body's next bytes, within the flow control
// windows (it waits for them), and ends the request when end is set.
func (st *ClientStream) Write(p []byte, end bool) error {
	cc := st.cc
	for {
		cc.mu.Lock()
		if err := st.writeErrLocked(); err != nil {
			cc.mu.Unlock()
			return err
		}
		n := min(len(p), int(max(0, min(st.sendWindow, cc.sendWindow))))
		if n == 0 && len(p) > 0 {
			cc.mu.Unlock()
			select {
			case <-st.room:
			case <-st.stop:
				return errStreamDone
			}
			continue
		}
		st.sendWindow -= int64(n)
		cc.sendWindow -= int64(n)
		last := end && n == len(p)
		if last {
			st.localEnded = true
		}
		frame := cc.peerFrame
		cc.mu.Unlock()
		cc.wmu.Lock()
		cc.wbuf = appendData(cc.wbuf, st.id, p[:n], last, frame)
		if err := cc.unlockWrite(); err != nil {
			return err
		}
		if p = p[n:]; len(p) == 0 {
			return nil
		}
	}
}

func (st *ClientStream) writeErrLocked() error {
	switch {
	case st.closed:
		return errStreamDone
	case st.err != nil:
		return st.err
	case st.localEnded:
		return errors.New("h2: write after the request's end")
	}
	return nil
}

// Abort ends the request for err (the client's body failed): the stream
// is reset (CANCEL), so the backend never takes a cut body for a whole
// one, and the owner's waits return err.
func (st *ClientStream) Abort(err error) {
	cc := st.cc
	cc.mu.Lock()
	rst := st.onWire
	if st.err == nil {
		st.err = err
	}
	cc.endStreamLocked(st)
	cc.mu.Unlock()
	if rst {
		cc.writeRST(st.id, ErrCodeCancel)
	}
}

// Head waits for the response head, up to wait (0: no bound), or until
// the stream's stop channel is closed.
func (st *ClientStream) Head(wait time.Duration) (int, []hpack.HeaderField, error) {
	cc := st.cc
	var t *time.Timer
	var tc <-chan time.Time
	defer func() {
		if t != nil {
			t.Stop() // since Go 1.23 no tick is left in C: the next user may Reset it
			headTimers.Put(t)
		}
	}()
	for {
		cc.mu.Lock()
		if st.headDone {
			cc.mu.Unlock()
			return st.status, st.fields, nil
		}
		if st.err != nil {
			err := st.err
			cc.mu.Unlock()
			return 0, nil, err
		}
		cc.mu.Unlock()
		if t == nil && wait > 0 {
			t = headTimers.Get().(*time.Timer)
			t.Reset(wait)
			tc = t.C
		}
		select {
		case <-st.wake:
		case <-st.stop:
			return 0, nil, errStreamDone
		case <-tc:
			return 0, nil, ErrHeadTimeout
		}
	}
}

// headTimers are the timers of Head's waits, stopped, for the next.
var headTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// HasBody reports whether a body may follow the head (no END_STREAM yet).
func (st *ClientStream) HasBody() bool {
	st.cc.mu.Lock()
	defer st.cc.mu.Unlock()
	return !st.remoteEnded || st.off < len(st.buf)
}

// ContentLength is the response's content-length, -1 for none.
func (st *ClientStream) ContentLength() int64 {
	st.cc.mu.Lock()
	defer st.cc.mu.Unlock()
	return st.declLen
}

// Read reads the response body; io.EOF at its end.
func (st *ClientStream) Read(p []byte) (int, error) {
	cc := st.cc
	for {
		cc.mu.Lock()
		if st.off < len(st.buf) {
			n := copy(p, st.buf[st.off:])
			st.off += n
			if st.off == len(st.buf) {
				st.buf, st.off = st.buf[:0], 0
			}
			var incr int64
			if !st.remoteEnded && st.err == nil && !st.closed {
				st.recvUnsent += int64(n)
				// Given back once half the window is due: few WINDOW_UPDATEs.
				if st.recvUnsent >= clientStreamWindow/2 || st.off == 0 && st.recvUnsent >= maxFrameSize {
					incr, st.recvUnsent = st.recvUnsent, 0
					st.recvAvail += incr
				}
			}
			cc.mu.Unlock()
			if incr > 0 {
				cc.wmu.Lock()
				cc.wbuf = appendWindowUpdate(cc.wbuf, st.id, uint32(incr))
				cc.unlockWrite()
			}
			return n, nil
		}
		switch {
		case st.closed:
			cc.mu.Unlock()
			return 0, errStreamDone
		case st.remoteEnded:
			cc.mu.Unlock()
			return 0, io.EOF
		case st.err != nil:
			err := st.err
			cc.mu.Unlock()
			return 0, err
		}
		cc.mu.Unlock()
		select {
		case <-st.wake:
		case <-st.stop:
			return 0, errStreamDone
		}
	}
}

// Trailers are the response's trailers, once its body has ended.
func (st *ClientStream) Trailers() []hpack.HeaderField {
	st.cc.mu.Lock()
	defer st.cc.mu.Unlock()
	if !st.remoteEnded {
		return nil
	}
	return st.trailers
}

// Close ends the stream for its owner: a stream still open either way is
// reset (CANCEL), so the backend stops at once; the waits on it return.
// It may be called more than once.
func (st *ClientStream) Close() {
	cc := st.cc
	cc.mu.Lock()
	if st.closed {
		cc.mu.Unlock()
		return
	}
	st.closed = true
	rst := st.onWire && st.err == nil && !(st.remoteEnded && st.localEnded)
	cc.endStreamLocked(st)
	st.buf, st.off = nil, 0
	cc.open--
	idle := cc.open == 0
	closeNow := idle && (cc.draining || cc.goAway)
	if idle && !closeNow && !cc.closed && cc.idle > 0 {
		if cc.idleTimer == nil {
			cc.idleTimer = time.AfterFunc(cc.idle, cc.onIdle)
		} else {
			cc.idleTimer.Reset(cc.idle)
		}
	}
	cc.mu.Unlock()
	if rst {
		cc.writeRST(st.id, ErrCodeCancel)
	}
	if closeNow {
		cc.goAwayAndClose()
	}
}

// endStreamLocked takes st off the wire and wakes its waiters. cc.mu is held.
func (cc *ClientConn) endStreamLocked(st *ClientStream) {
	if st.onWire {
		st.onWire = false
		delete(cc.streams, st.id)
	}
	st.signal()
}

func (st *ClientStream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
	if st.room != nil {
		select {
		case st.room <- struct{}{}:
		default:
		}
	}
}

// onIdle closes a connection that has had no stream for the idle timeout.
func (cc *ClientConn) onIdle() {
	cc.mu.Lock()
	idle := cc.open == 0 && !cc.closed
	if idle {
		cc.draining = true
	}
	cc.mu.Unlock()
	if idle {
		cc.goAwayAndClose()
	}
}

func (cc *ClientConn) writeRST(id uint32, code ErrCode) {
	cc.wmu.Lock()
	cc.wbuf = appendRSTStream(cc.wbuf, id, code)
	cc.unlockWrite()
}

// readLoop reads frames until the connection ends.
func (cc *ClientConn) readLoop() {
	var err error
	defer func() { cc.readDone(err) }()
	first := true
	for {
		var hdr []byte
		if hdr, err = cc.br.Peek(frameHeaderLen); err != nil {
			return
		}
		fh := parseFrameHeader(hdr)
		if first && (fh.typ != frameSettings || fh.flags&flagAck != 0) {
			err = cc.connError(ErrCodeProtocol, "first frame not SETTINGS")
			return
		}
		first = false
		if fh.length > maxFrameSize {
			err = cc.connError(ErrCodeFrameSize, "frame too large")
			return
		}
		cc.br.Discard(frameHeaderLen)
		n := int(fh.length)
		var p []byte
		if p, err = readPayload(cc.br, n, &cc.scratch); err != nil {
			return
		}
		err = cc.frame(fh, p)
		if n <= cc.br.Size() {
			cc.br.Discard(n)
		}
		if err != nil {
			return
		}
	}
}

// readDone ends the connection for the reader's err: every stream still
// open fails.
func (cc *ClientConn) readDone(err error) {
	var ce *ConnError
	if !errors.As(err, &ce) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		err = &ConnError{Err: err}
	}
	cc.mu.Lock()
	cc.closed = true
	if cc.err == nil {
		cc.err = err
	}
	for _, st := range cc.streams {
		if st.err == nil {
			st.err = cc.err
		}
		cc.endStreamLocked(st)
	}
	cc.mu.Unlock()
	if ce != nil && !ce.Remote && ce.Err == nil {
		// levee's GOAWAY for the backend's protocol error: what the
		// backend still sends is read, for a while, before the close.
		// Closing with unread input resets the connection, and the reset
		// can destroy the GOAWAY before the backend has read why.
		cc.nc.SetReadDeadline(time.Now().Add(clientLinger))
		io.CopyN(io.Discard, cc.nc, lingerBytes)
	}
	cc.nc.Close()
	close(cc.done)
}

// clientLinger bounds the read before a connection that levee ended for
// the backend's protocol error is closed: the backend needs only to read
// the GOAWAY already sent, and the reader (no stream) waits on it.
const clientLinger = 250 * time.Millisecond

// connError ends the connection for the backend's protocol error: GOAWAY
// with code, then the close (readDone).
func (cc *ClientConn) connError(code ErrCode, reason string) error {
	e := &ConnError{Code: code, Reason: reason}
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = e
	}
	cc.closed = true
	cc.mu.Unlock()
	cc.wmu.Lock()
	cc.wbuf = appendGoAway(cc.wbuf, 0, code)
	cc.unlockWrite()
	return e
}

// spend takes n from the control frame budget.
func (cc *ClientConn) spend(n int64) error {
	if cc.calm.Add(-n) < 0 {
		return cc.connError(ErrCodeEnhanceYourCalm, "too many control frames")
	}
	return nil
}

// errCalm is a spent budget found under cc.mu: the reader ends the
// connection for it (ENHANCE_YOUR_CALM) once the lock is released.
var errCalm = errors.New("h2: too many control frames")

func (cc *ClientConn) spendLocked(n int64) error {
	if cc.calm.Add(-n) < 0 {
		return errCalm
	}
	return nil
}

// frame handles one frame; an error ends the connection.
func (cc *ClientConn) frame(fh frameHeader, p []byte) error {
	if cc.hb.active && fh.typ != frameContinuation {
		return cc.connError(ErrCodeProtocol, "frame inside a header block")
	}
	if f, ok := checkFrame(fh, p); !ok {
		if f.stream {
			return cc.faultOnStream(fh.stream, f)
		}
		return cc.connError(f.code, f.reason)
	}
	switch fh.typ {
	case frameData:
		return cc.onData(fh, p)
	case frameHeaders:
		return cc.onHeaders(fh, p)
	case frameContinuation:
		if !cc.hb.active || fh.stream != cc.hb.id {
			return cc.connError(ErrCodeProtocol, "unexpected CONTINUATION")
		}
		return cc.headerFragment(p, fh.flags&flagEndHeaders != 0)
	case frameRSTStream:
		return cc.onRSTStream(fh, p)
	case frameSettings:
		return cc.onSettings(fh, p)
	case framePing:
		if err := cc.spend(1); err != nil {
			return err
		}
		if fh.flags&flagAck != 0 {
			return nil
		}
		cc.wmu.Lock()
		cc.wbuf = appendFrameHeader(cc.wbuf, 8, framePing, flagAck, 0)
		cc.wbuf = append(cc.wbuf, p...)
		cc.unlockWrite()
		return nil
	case frameGoAway:
		return cc.onGoAway(fh, p)
	case frameWindowUpdate:
		return cc.onWindowUpdate(fh, p)
	default:
		return cc.spend(1) // PRIORITY is advice levee does not take; unknown types are ignored (§4.1)
	}
}

// faultOnStream is the reaction to a frame that breaks a rule the RFC
// makes a stream error: the stream is reset, if levee has it open.
func (cc *ClientConn) faultOnStream(id uint32, f frameFault) error {
	cc.mu.Lock()
	if cc.idleLocked(id) {
		cc.mu.Unlock()
		return cc.connError(ErrCodeProtocol, "a frame on an idle stream")
	}
	st := cc.streams[id]
	cc.mu.Unlock()
	if st != nil {
		cc.streamError(st, f.code, f.reason)
	}
	return cc.spend(1)
}

// idleLocked reports whether id names a stream levee never opened.
func (cc *ClientConn) idleLocked(id uint32) bool { return id%2 == 0 || id >= cc.nextID }

func (cc *ClientConn) onSettings(fh frameHeader, p []byte) error {
	if fh.flags&flagAck != 0 {
		cc.mu.Lock()
		cc.unacked--
		bad := cc.unacked < 0
		cc.mu.Unlock()
		if bad {
			return cc.connError(ErrCodeProtocol, "SETTINGS ACK for nothing")
		}
		return nil
	}
	if err := cc.spend(1); err != nil {
		return err
	}
	cc.mu.Lock()
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		if f, ok := checkSetting(id, v, true); !ok {
			cc.mu.Unlock()
			return cc.connError(f.code, f.reason)
		}
		switch id {
		case settingMaxConcurrentStreams:
			cc.maxStreams = min(v, unlimitedStreams)
		case settingInitialWindowSize:
			delta := int64(v) - cc.peerWindow
			cc.peerWindow = int64(v)
			for _, st := range cc.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					cc.mu.Unlock()
					return cc.connError(ErrCodeFlowControl, "window overflow")
				}
				if delta > 0 {
					st.signal()
				}
			}
		}
	}
	cc.mu.Unlock()
	cc.wmu.Lock()
	cc.wbuf = appendFrameHeader(cc.wbuf, 0, frameSettings, flagAck, 0)
	cc.unlockWrite()
	select {
	case <-cc.settled:
	default:
		close(cc.settled)
	}
	return nil
}

func (cc *ClientConn) onWindowUpdate(fh frameHeader, p []byte) error {
	incr := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	cc.mu.Lock()
	if fh.stream == 0 {
		if incr == 0 {
			cc.mu.Unlock()
			return cc.connError(ErrCodeProtocol, "WINDOW_UPDATE of 0")
		}
		cc.sendWindow += incr
		if cc.sendWindow > maxWindow {
			cc.mu.Unlock()
			return cc.connError(ErrCodeFlowControl, "connection window overflow")
		}
		for _, st := range cc.streams {
			if !st.localEnded {
				st.signal()
			}
		}
		cc.mu.Unlock()
		return nil
	}
	if cc.idleLocked(fh.stream) {
		cc.mu.Unlock()
		return cc.connError(ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
	}
	st := cc.streams[fh.stream]
	if st == nil {
		cc.mu.Unlock()
		return nil // a closed stream: ignored (§6.9)
	}
	var f frameFault
	switch {
	case incr == 0:
		f = frameFault{ErrCodeProtocol, "WINDOW_UPDATE of 0", true}
	case st.sendWindow+incr > maxWindow:
		f = frameFault{ErrCodeFlowControl, "stream window overflow", true}
	default:
		st.sendWindow += incr
		st.signal()
	}
	cc.mu.Unlock()
	if f.stream {
		cc.streamError(st, f.code, f.reason)
	}
	return nil
}

func (cc *ClientConn) onRSTStream(fh frameHeader, p []byte) error {
	cc.mu.Lock()
	if cc.idleLocked(fh.stream) {
		cc.mu.Unlock()
		return cc.connError(ErrCodeProtocol, "RST_STREAM on an idle stream")
	}
	if st := cc.streams[fh.stream]; st != nil {
		if st.err == nil {
			st.err = &StreamError{Code: ErrCode(binary.BigEndian.Uint32(p)), Remote: true}
		}
		cc.endStreamLocked(st)
	}
	cc.mu.Unlock()
	return cc.spend(1)
}

func (cc *ClientConn) onGoAway(fh frameHeader, p []byte) error {
	last := binary.BigEndian.Uint32(p) & 0x7fffffff
	code := ErrCode(binary.BigEndian.Uint32(p[4:]))
	cc.mu.Lock()
	cc.goAway = true
	for id, st := range cc.streams {
		if id > last {
			// Never taken: safe to send again (§6.8).
			if st.err == nil {
				st.err = errors.Join(ErrUnprocessed, &ConnError{Code: code, Remote: true})
			}
			cc.endStreamLocked(st)
		}
	}
	if code != ErrCodeNo && cc.err == nil {
		cc.err = &ConnError{Code: code, Remote: true}
	}
	idle := cc.open == 0
	cc.mu.Unlock()
	if idle {
		cc.goAwayAndClose()
	}
	return nil
}

// streamError resets st for the backend's error on it: its
// owner's waits fail with a StreamError.
func (cc *ClientConn) streamError(st *ClientStream, code ErrCode, reason string) {
	cc.mu.Lock()
	rst := st.onWire
	if st.err == nil {
		st.err = &StreamError{Code: code, Reason: reason}
	}
	cc.endStreamLocked(st)
	cc.mu.Unlock()
	if rst {
		cc.writeRST(st.id, code)
	}
}

func (cc *ClientConn) onData(fh frameHeader, p []byte) error {
	data, ok := dataPayload(fh, p)
	if !ok {
		return cc.connError(ErrCodeProtocol, "DATA padding")
	}
	end := fh.flags&flagEndStream != 0
	if len(data) == 0 && !end {
		if err := cc.spend(1); err != nil {
			return err
		}
	}
	n := int64(fh.length)
	cc.mu.Lock()
	if cc.idleLocked(fh.stream) {
		cc.mu.Unlock()
		return cc.connError(ErrCodeProtocol, "DATA on an idle stream")
	}
	if n > cc.recvAvail {
		cc.mu.Unlock()
		return cc.connError(ErrCodeFlowControl, "connection window exceeded")
	}
	// The connection's window is given back as data arrives: the
	// streams' windows bound what is held.
	cc.recvAvail -= n
	cc.recvUnsent += n
	var connIncr int64
	if cc.recvUnsent >= clientConnWindow/4 {
		connIncr, cc.recvUnsent = cc.recvUnsent, 0
		cc.recvAvail += connIncr
	}
	st := cc.streams[fh.stream]
	var reason string
	code := ErrCodeProtocol
	switch {
	case st == nil:
		// A stream levee closed: what was in flight is dropped.
	case st.remoteEnded:
		reason, code = "DATA after END_STREAM", ErrCodeStreamClosed
	case n > st.recvAvail:
		reason, code = "stream window exceeded", ErrCodeFlowControl
	case !st.headDone:
		reason = "DATA before the response head"
	case st.noBody && len(data) > 0:
		reason = "DATA in a response that has no body"
	case st.declLen >= 0 && st.got+int64(len(data)) > st.declLen:
		reason = "DATA beyond content-length"
	case end && st.declLen >= 0 && !st.noBody && st.got+int64(len(data)) != st.declLen:
		reason = "body shorter than content-length"
	default:
		st.recvAvail -= n
		st.got += int64(len(data))
		if st.closed {
			break
		}
		if st.off > 0 && len(st.buf)+len(data) > cap(st.buf) {
			st.buf = st.buf[:copy(st.buf, st.buf[st.off:])]
			st.off = 0
		}
		st.buf = append(st.buf, data...)
		// Padding is given back with what the owner reads.
		st.recvUnsent += n - int64(len(data))
		if end {
			cc.endRemoteLocked(st)
		}
		st.signal()
	}
	cc.mu.Unlock()
	if connIncr > 0 {
		cc.wmu.Lock()
		cc.wbuf = appendWindowUpdate(cc.wbuf, 0, uint32(connIncr))
		cc.unlockWrite()
	}
	if reason != "" {
		cc.streamError(st, code, reason)
	}
	return nil
}

// onHeaders starts a header block: a response head (or a 1xx), or
// trailers.
func (cc *ClientConn) onHeaders(fh frameHeader, p []byte) error {
	p, _, f, ok := headersPayload(fh, p)
	if !ok {
		return cc.connError(f.code, f.reason)
	}
	cc.mu.Lock()
	if cc.idleLocked(fh.stream) {
		cc.mu.Unlock()
		return cc.connError(ErrCodeProtocol, "HEADERS on an idle stream")
	}
	st := cc.streams[fh.stream]
	trailers := st != nil && st.headDone
	cc.mu.Unlock()
	cc.hb = clientBlock{active: true, st: st, id: fh.stream, endStream: fh.flags&flagEndStream != 0,
		trailers: trailers, fields: cc.hb.fields[:0], remain: cc.maxHList}
	return cc.headerFragment(p, fh.flags&flagEndHeaders != 0)
}

// headerFragment decodes one fragment of the block; the last one ends it.
func (cc *ClientConn) headerFragment(p []byte, end bool) error {
	cc.hb.bytes += len(p)
	if cc.hb.bytes > 2*int(cc.maxHList)+16<<10 {
		return cc.connError(ErrCodeEnhanceYourCalm, "header block too large")
	}
	if _, err := cc.hdec.Write(p); err != nil {
		return cc.connError(ErrCodeCompression, "header block")
	}
	if !end {
		return nil
	}
	cc.hb.active = false
	if err := cc.hdec.Close(); err != nil {
		return cc.connError(ErrCodeCompression, "header block")
	}
	cc.hdec.SetEmitEnabled(true)
	err := cc.endHeaders()
	clear(cc.hb.fields) // no strings kept past the stream's own copy
	return err
}

// connectionFields are the fields HTTP/2 forbids (RFC 9113 §8.2.2).
var connectionFields = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true}

// emit receives each decoded field of a response's block.
func (cc *ClientConn) emit(f hpack.HeaderField) {
	hb := &cc.hb
	if hb.invalid != "" || hb.tooLarge || hb.st == nil {
		return
	}
	switch {
	case !httpguts.ValidHeaderFieldValue(f.Value):
		hb.invalid = "a field value with a control byte"
	case len(f.Name) > 0 && f.Name[0] == ':':
		switch {
		case hb.trailers:
			hb.invalid = "a pseudo-header in trailers"
		case hb.sawRegular:
			hb.invalid = "a pseudo-header after a regular field"
		case f.Name != ":status":
			hb.invalid = "a pseudo-header other than :status"
		case hb.status != 0:
			hb.invalid = "two :status"
		default:
			hb.status = parseStatus(f.Value)
			if hb.status == 0 {
				hb.invalid = "a :status that is not 3 digits"
			}
		}
	default:
		hb.sawRegular = true
		switch {
		case !validWireName(f.Name):
			hb.invalid = "a field name that is not a lower-case token"
		case connectionFields[f.Name] || f.Name == "te" && f.Value != "trailers":
			hb.invalid = "a connection-specific field"
		}
	}
	if hb.invalid != "" {
		cc.hdec.SetEmitEnabled(false)
		return
	}
	if size := f.Size(); size > hb.remain {
		hb.tooLarge = true
		cc.hdec.SetEmitEnabled(false)
		return
	} else {
		hb.remain -= size
	}
	hb.fields = append(hb.fields, f)
}

// parseStatus is a :status of three digits, 0 for anything else.
func parseStatus(s string) int {
	if len(s) != 3 {
		return 0
	}
	n := 0
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 100 {
		return 0
	}
	return n
}

// endHeaders acts on a complete header block.
func (cc *ClientConn) endHeaders() error {
	hb := &cc.hb
	st := hb.st
	if st == nil {
		return nil // a closed stream's: decoded to keep the table, dropped
	}
	reason, code, err := cc.takeBlock(st)
	if reason != "" {
		cc.streamError(st, code, reason)
	}
	if err == errCalm {
		return cc.connError(ErrCodeEnhanceYourCalm, "too many control frames")
	}
	return err
}

// takeBlock gives st the block just decoded: its head, a 1xx (dropped)
// or its trailers. It returns why the block is malformed, if it is.
func (cc *ClientConn) takeBlock(st *ClientStream) (reason string, code ErrCode, err error) {
	hb := &cc.hb
	code = ErrCodeProtocol
	switch {
	case hb.invalid != "":
		return hb.invalid, code, nil
	case hb.tooLarge:
		return "a header list over " + strconv.Itoa(int(cc.maxHList)) + " bytes", code, nil
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if st.remoteEnded {
		return "HEADERS after END_STREAM", ErrCodeStreamClosed, nil
	}
	if hb.trailers {
		switch {
		case !hb.endStream:
			return "trailers without END_STREAM", code, nil
		case st.declLen >= 0 && !st.noBody && st.got != st.declLen:
			return "body shorter than content-length", code, nil
		}
		st.trailers = append([]hpack.HeaderField(nil), hb.fields...)
		cc.endRemoteLocked(st)
		return "", 0, nil
	}
	if hb.status == 0 {
		return "no :status", code, nil
	}
	declLen := int64(-1)
	for _, f := range hb.fields {
		if f.Name != "content-length" {
			continue
		}
		n, perr := strconv.ParseUint(f.Value, 10, 63)
		if perr != nil || f.Value[0] == '+' || declLen >= 0 && int64(n) != declLen {
			return "a bad content-length", code, nil
		}
		declLen = int64(n)
	}
	if hb.status < 200 {
		if hb.status == 101 || hb.endStream {
			return "a 101, or a 1xx that ends the stream", code, nil
		}
		if st.informed++; st.informed > maxInformational {
			return "too many 1xx heads", code, nil
		}
		return "", 0, cc.spendLocked(1) // informational: dropped
	}
	st.noBody = st.head || hb.status == 204 || hb.status == 304
	if hb.endStream && !st.noBody && declLen > 0 {
		return "no body after a content-length", code, nil
	}
	st.status, st.declLen, st.headDone = hb.status, declLen, true
	st.fields = append(st.fieldsArr[:0], hb.fields...)
	if hb.endStream {
		cc.endRemoteLocked(st)
		return "", 0, nil
	}
	st.signal()
	return "", 0, nil
}

// endRemoteLocked records the backend's END_STREAM on st. cc.mu is held.
func (cc *ClientConn) endRemoteLocked(st *ClientStream) {
	st.remoteEnded = true
	if st.localEnded {
		cc.endStreamLocked(st)
	}
	st.signal()
}

// AppendRequestHead appends a request's pseudo-header fields to an
// HPACK block: :method, :scheme, :authority, :path.
func AppendRequestHead(b []byte, method, scheme, authority, path []byte) []byte {
	switch string(method) {
	case "GET":
		b = append(b, 0x82)
	case "POST":
		b = append(b, 0x83)
	default:
		b = appendInt(b, 0, 4, 2) // literal without indexing, name :method (2)
		b = appendRaw(b, method)
	}
	switch string(scheme) {
	case "https":
		b = append(b, 0x87)
	default:
		b = append(b, 0x86)
	}
	b = appendInt(b, 0, 4, 1) // :authority (1)
	b = appendRaw(b, authority)
	if string(path) == "/" {
		return append(b, 0x84)
	}
	b = appendInt(b, 0, 4, 4) // :path (4)
	return appendRaw(b, path)
}

// AppendRequestField appends one request field, its name lower-cased, as
// a literal without indexing (never indexed for credentials). It reports
// false, appending nothing, for a field HTTP/2 cannot carry as it is: a
// name that is not a token, a value with NUL, CR or LF.
func AppendRequestField(b []byte, name, value []byte) ([]byte, bool) {
	if len(name) == 0 {
		return b, false
	}
	for _, c := range name {
		if !httpguts.IsTokenRune(rune(c)) {
			return b, false
		}
	}
	for _, c := range value {
		if c == 0 || c == '\r' || c == '\n' {
			return b, false
		}
	}
	first := byte(0x00)
	w, ok := staticNames[string(name)]
	if ascii.EqualFold(name, "authorization") || ascii.EqualFold(name, "cookie") {
		first = 0x10 // never indexed, by any hop
	}
	if ok && w.index != 0 {
		b = appendInt(b, first, 4, uint64(w.index))
	} else {
		b = append(b, first)
		b = appendInt(b, 0, 7, uint64(len(name)))
		for _, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	return appendRaw(b, value), true
}

// appendRaw appends p as a string literal without Huffman coding: a
// backend's link is not where bytes are short, and the CPU is.
func appendRaw(b, p []byte) []byte {
	b = appendInt(b, 0, 7, uint64(len(p)))
	return append(b, p...)
}

// String describes the connection, for logs.
func (cc *ClientConn) String() string {
	return fmt.Sprintf("h2 client conn to %v", cc.nc.RemoteAddr())
}
