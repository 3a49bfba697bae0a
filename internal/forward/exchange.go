package forward

import (
	"bufio"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/chunked"
)

// exchange is the fasthttp engine's RoundTripper: levee's pool (h1Pool)
// keeps the connections (max_conns_per_backend, the wait for one, the idle
// timeout) and exchange does the request on a connection, so that a
// connection goes back to the pool only after a clean exchange
// (docs/http.md, "Backend connections"):
//
//   - the whole request was written before the response began;
//   - the response was framed unambiguously and read to its end;
//   - nothing is left to read, neither in levee's buffer nor on the socket,
//     when it goes back, and nothing is readable when it is taken again
//     (a backend's unsolicited bytes, or its close);
//   - a 101 to a request that asked for no upgrade is a 502.
//
// Otherwise the connection is closed, counted by reason in the pool's
// Unclean and logged at the error log's rate. The bytes left behind are
// what would answer the next request on the connection, perhaps another
// client's: a backend that answers before it reads a body, then reads the
// body as a request (a request smuggled in it), or a body on a HEAD, 204
// or 304 response.
//
// HostClient drives the exchange (Do) and lends it its buffers.
type exchange struct {
	unclean *Unclean
	watches *watches // the net/http engine's request contexts
	addr    string
	pool    *h1Pool
}

// reuses reports whether connections are kept after an exchange
// (max_idle_per_backend > 0).
func (x *exchange) reuses() bool { return x.pool.stats.reuse }

// close closes c, ending its request's watch.
func (x *exchange) close(c *backendConn) {
	c.unwatch()
	x.pool.closeConn(c)
}

// Reasons a backend connection is closed after an exchange that did not
// end cleanly, as levee_backend_conns_unclean_total counts them.
const (
	// UncleanUnsolicited: bytes (or the backend's close) were readable on
	// an idle connection when a request took it.
	UncleanUnsolicited = "unsolicited"
	// UncleanAfterEnd: bytes followed the end of a response's body.
	UncleanAfterEnd = "after-end"
	// UncleanBodiless: a HEAD, 204 or 304 response was followed by bytes
	// (a body it may not have).
	UncleanBodiless = "bodiless-body"
	// UncleanEarly: the response began before the request was written.
	UncleanEarly = "early-response"
	// UncleanSwitch: a 101 to a request that asked for no upgrade.
	UncleanSwitch = "unasked-switch"
)

// UncleanReasons are the reasons of Unclean, in its order.
var UncleanReasons = [...]string{UncleanUnsolicited, UncleanAfterEnd, UncleanBodiless, UncleanEarly, UncleanSwitch}

// Unclean counts backend connections closed by reason (UncleanReasons), and
// logs each through Log when set. Safe for concurrent use.
type Unclean struct {
	n [len(UncleanReasons)]atomic.Uint64
	// Log, if set, is told of each (reason, backend address); it should
	// write at a bounded rate (observe.ErrorLog).
	Log func(reason, addr string)
}

// Count returns the connections closed for reason.
func (u *Unclean) Count(reason string) uint64 {
	for i, r := range UncleanReasons {
		if r == reason {
			return u.n[i].Load()
		}
	}
	return 0
}

func (u *Unclean) add(i int, addr string) {
	if u == nil {
		return
	}
	u.n[i].Add(1)
	if u.Log != nil {
		u.Log(UncleanReasons[i], addr)
	}
}

const (
	iUnsolicited = iota
	iAfterEnd
	iBodiless
	iEarly
	iSwitch
)

// errUnaskedSwitch is a 101 to a request that did not ask to upgrade: the
// backend now speaks another protocol on the connection, so it is a 502.
var errUnaskedSwitch = errors.New("forward: backend switched protocols unasked (101 to a request without Upgrade)")

// maxInterim bounds the interim (1xx) responses before a final one.
const maxInterim = 8

// errTooManyInterim is a backend that sent more than maxInterim interim
// responses to one request.
var errTooManyInterim = errors.New("forward: backend sent more than 8 interim (1xx) responses")

// RoundTrip is fasthttp.RoundTripper's: retry tells HostClient.Do it may
// try again (its RetryIfErr decides), as fasthttp's own transport does.
func (x *exchange) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	skipBody := resp.SkipBody || req.Header.IsHead()
	if !x.reuses() {
		// No reuse (max_idle_per_backend 0): the backend closes after
		// answering, so that not even a response without a body leaves
		// its connection idle. Here, for both engines' requests.
		req.Header.SetConnectionClose()
	}
	c, err := x.acquire()
	if err != nil {
		return false, err
	}
	if ctx := x.watches.of(req); ctx != nil {
		if err := ctx.Err(); err != nil {
			x.pool.closeConn(c)
			return false, err
		}
		c.watch(ctx)
	}
	resp.ParseNetConn(c)
	c.startRequest()
	c.stats.exchanges.Add(1)
	bw := hc.AcquireWriter(c)
	err = req.Write(bw)
	if err == nil {
		// The request's last bytes go out with the response's first
		// read (backendConn.Read, sockio's SendRead): bw's buffer holds
		// them until then.
		c.holdLastWrite()
		err = bw.Flush()
	}
	if err != nil {
		c.dropHeld()
		hc.ReleaseWriter(bw)
		if isTimeout(err) {
			err = fasthttp.ErrTimeout
		}
		x.close(c)
		return true, err
	}
	var deadline time.Time
	if hc.ReadTimeout > 0 {
		deadline = time.Now().Add(hc.ReadTimeout)
	}
	return x.readResponse(hc, c, req, resp, skipBody, deadline, bw)
}

// readResponse reads on c the answer to req (written), its head into resp
// by deadline (zero: none) and its body framed for resp to stream. bw, if
// not nil, holds the request's last bytes (holdLastWrite) and is released
// once the first read has sent them. retry is RoundTrip's.
func (x *exchange) readResponse(hc *fasthttp.HostClient, c *backendConn, req *fasthttp.Request, resp *fasthttp.Response,
	skipBody bool, deadline time.Time, bw *bufio.Writer) (retry bool, err error) {
	releaseWriter := func() {
		c.dropHeld() // sent by the first read, or never to be
		if bw != nil {
			hc.ReleaseWriter(bw)
		}
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		releaseWriter()
		x.close(c)
		return true, err
	}
	resp.Header.DisableNormalizing()
	br := hc.AcquireReader(c)
	err = readHead(resp, br)
	releaseWriter()
	if err != nil {
		hc.ReleaseReader(br)
		if errors.Is(err, errUnaskedSwitch) {
			x.unclean.add(iSwitch, x.addr)
		}
		x.close(c)
		return !refusedHead(err), err
	}
	keep := !req.ConnectionClose() && !resp.ConnectionClose()
	code := resp.StatusCode()
	if skipBody || code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified {
		x.release(hc, c, br, keep, iBodiless)
		return false, nil
	}
	b := &h1Body{x: x, hc: hc, held: true, c: c, keep: keep}
	n := b.frame.init(resp, br)
	if b.frame.left < 0 {
		b.keep = false // to the backend's close
	}
	if n == 0 {
		b.end()
	}
	resp.SetBodyStream(b, n)
	return false, nil
}

// acquire takes a connection from the pool, closing those that a request
// must not be written on (usable). Nothing of the request has been
// written yet, so the next connection (in the end a new one) serves it
// as well, whatever it is.
func (x *exchange) acquire() (*backendConn, error) {
	var deadline time.Time
	for {
		c, err := x.pool.take()
		if errors.Is(err, errDialDeferred) {
			// A connection came back while the dial waited for the budget:
			// take it, within one wait for a connection in all.
			if deadline.IsZero() {
				deadline = time.Now().Add(x.pool.wait)
			} else if time.Now().After(deadline) {
				return nil, errDialBudget
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if x.usable(c) {
			return c, nil
		}
	}
}

// usable reports whether a request may be written on c, just taken from
// the pool: a new connection, or an idle one with nothing to read (no
// bytes, no close by the backend). If not, c is closed, and bytes found
// on it are counted (UncleanUnsolicited). Both acquire and takeIdle ask.
func (x *exchange) usable(c *backendConn) bool {
	if !c.used {
		return true
	}
	switch c.peek() {
	case peekEmpty:
		return true
	case peekData:
		x.unclean.add(iUnsolicited, x.addr)
	}
	x.pool.closeConn(c)
	return false
}

// readHead reads a response header from br into resp, past interim
// responses (1xx but 101: at most maxInterim, as RFC 9110 §15.2 lets a
// client skip them). A 101 is refused: levee upgrades only on a
// connection of its own (Pool.tunnel), never on one of the pool.
func readHead(resp *fasthttp.Response, br *bufio.Reader) error {
	return readFinalHead(resp, br, false)
}

// readFinalHead is readHead, taking a 101 as final if upgrading.
func readFinalHead(resp *fasthttp.Response, br *bufio.Reader, upgrading bool) error {
	for n := 0; ; n++ {
		if err := checkHead(br); err != nil {
			return err
		}
		if err := resp.Header.Read(br); err != nil {
			return err
		}
		code := resp.Header.StatusCode()
		if code == fasthttp.StatusSwitchingProtocols {
			if upgrading {
				return nil
			}
			return errUnaskedSwitch
		}
		if code >= 200 || code < 100 {
			return nil
		}
		if n == maxInterim {
			return errTooManyInterim
		}
	}
}

// refusedHead reports a head readFinalHead refused for what the backend
// sent, rather than for a failed read: not worth a retry on the same backend.
func refusedHead(err error) bool {
	return errors.Is(err, errTooManyInterim) || errors.Is(err, errUnaskedSwitch) || errors.As(err, new(*BadHeadError))
}

// release gives c back to the pool after an exchange that ended where its
// framing said it would, if keep and nothing is left in levee's buffer
// (else closes it, counted under reason). Bytes on the socket beyond the
// buffer are not looked for here: acquire looks before the connection's
// next request is written, which sees them too, and those that arrive
// later; one look a request, not two (a recvfrom each).
func (x *exchange) release(hc *fasthttp.HostClient, c *backendConn, br *bufio.Reader, keep bool, reason int) {
	left := br.Buffered() > 0
	hc.ReleaseReader(br)
	watched := c.unwatch()
	switch {
	case !watched:
		// The request ended while its response was read: the connection
		// was aborted mid-read, whatever is left on it.
	case left:
		x.unclean.add(reason, x.addr)
	case c.early:
		x.unclean.add(iEarly, x.addr)
	default:
		x.putBack(c, keep)
		return
	}
	x.pool.closeConn(c)
}

// putBack ends a clean exchange on c: the connection goes back to the
// pool if the answer let it stay open (keep) and the pool reuses, else it
// closes. Both release and the loop's LoopCall.Done end so.
func (x *exchange) putBack(c *backendConn, keep bool) {
	if keep && x.reuses() {
		c.used = true
		x.pool.put(c)
		return
	}
	x.pool.closeConn(c)
}

// bodyFrame reads a response body as its head frames it: by
// Content-Length (left bytes), by chunks, or to the backend's close (left
// -1); read returns io.EOF at its end.
type bodyFrame struct {
	br      *bufio.Reader
	chunked bool
	left    int64 // bytes left of the body, or of the chunk; -1: to the close
	chunk   chunked.Reader
}

// init frames the body of resp, read from br, and returns its length as
// SetBodyStream takes it (-1: unknown).
func (f *bodyFrame) init(resp *fasthttp.Response, br *bufio.Reader) int {
	f.br = br
	switch n := resp.Header.ContentLength(); {
	case n >= 0:
		f.left = int64(n)
		return n
	case n == -1:
		f.chunked = true
	default: // -2: neither, so the body runs to the backend's close
		f.left = -1
	}
	return -1
}

func (f *bodyFrame) read(p []byte) (int, error) {
	switch {
	case f.chunked:
		return f.chunk.Read(f.br, p)
	case f.left < 0:
		return f.br.Read(p)
	case f.left == 0:
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.br.Read(p)
	f.left -= int64(n)
	if f.left == 0 {
		err = io.EOF
	} else if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// h1Body is a backend's response body on a pooled connection. At its end
// it gives its connection back through exchange.release; closed before
// that (CloseWithError), it closes the connection.
type h1Body struct {
	x     *exchange
	hc    *fasthttp.HostClient
	held  bool // c is still this body's
	c     *backendConn
	keep  bool
	frame bodyFrame
	eof   bool
	err   error
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.frame.read(p)
	if err == io.EOF {
		b.end()
		return n, io.EOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// end is the body read to its end: the connection goes back if clean.
func (b *h1Body) end() {
	b.eof = true
	if b.held {
		b.held = false
		b.x.release(b.hc, b.c, b.frame.br, b.keep, iAfterEnd)
	}
}

// CloseWithError is fasthttp.ReadCloserWithError's: a body closed before
// its end closes its connection.
func (b *h1Body) CloseWithError(error) error {
	if b.held {
		b.held = false
		b.hc.ReleaseReader(b.frame.br)
		b.x.close(b.c)
	}
	return nil
}
