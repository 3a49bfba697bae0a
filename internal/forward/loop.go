package forward

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/sockio"
)

// LoopCall is a request an event loop (server.event_loop) forwards from
// its own poller, with no goroutine woken for it (issue 19): the loop
// picks the backend, takes an idle connection of its HTTP/1.1 pool
// without waiting or dialling, writes the request's head on it, watches
// the socket and reads the answer when it comes. An answer that comes
// whole and plainly framed (a head and a body of Content-Length, at most
// loopMax bytes in all) is the loop's to write: LoopCall.Answer, then
// Done. Anything else (no idle connection, an interim or unasked 101
// answer, a head the exchange refuses, a chunked, long or close-delimited
// body, bytes after the end, a status the app retries, a timeout) is the
// forward core's, on a worker, from where the loop left it: Pool.serve
// resumes the call (Body.Loop), and the exchange reads on the connection
// what the loop read first (backendConn.pre). So the rules of a clean
// exchange, the error ladder and the retries stay the forward core's
// alone; the loop only ever completes the exchange that breaks none.
type LoopCall struct {
	p    *Pool
	be   *backend
	pk   *pick          // nil: no backend picked (resumed: serve picks)
	slot admit.Releaser // the slot, while pk does not hold it
	c    *backendConn   // the connection the head went out on (of be's pool); nil: none
	head bool           // HEAD: the answer has no body

	req      fasthttp.RequestHeader // the request's head
	out      []byte                 // req, as written
	buf      []byte                 // the answer as read
	resp     fasthttp.Response
	rd       bytes.Reader
	br       *bufio.Reader
	end      int // the answer's head's length in buf, once whole
	deadline time.Time
	keep     bool // the connection may serve again after the answer
}

// loopMax bounds an answer the loop writes itself, head and body: a
// longer one streams from a worker, as the forward core streams any
// answer, under response_buffer and the spill.
const loopMax = 16 << 10

// loopHeadMax is the longest answer head the exchange reads: its reader's
// buffer (fasthttp's default, which HostClient's reader has).
const loopHeadMax = 4096

var loopCalls = sync.Pool{New: func() any { return new(LoopCall) }}

// ForwardsFromLoop reports whether an event loop may forward p's requests
// itself (StartLoop): each backend is spoken to over HTTP/1.1 with
// connections kept alive, no bandwidth limit paces the answers, and the
// hash key, if any, is not a cookie (the loop's head is not parsed for
// one).
func (p *Pool) ForwardsFromLoop() bool {
	if p.bw != nil || p.key.Kind() == clientkey.Cookie {
		return false
	}
	for _, be := range p.backends {
		if be.up == nil || be.up.h2 != nil || !be.up.dialer.stats.reuse {
			return false
		}
	}
	return true
}

// StartLoop begins forwarding, from an event loop, the GET or HEAD
// request h (simple: no body) of the client at peer (peerIP written out),
// admitted with slot. It never waits. The call it returns holds slot from
// then on; if its Fd is not negative, the loop watches that socket and
// calls Read when it is readable, else it hands the call to a worker at
// once (Pool.serve resumes it).
func (p *Pool) StartLoop(cc *h1loop.Conn, h *h1loop.Head, peer netip.Addr, peerIP string, in Body, slot admit.Releaser) *LoopCall {
	lc := loopCalls.Get().(*LoopCall)
	lc.p, lc.slot, lc.head = p, slot, string(h.Method) == "HEAD"
	start := time.Now()
	var key string
	switch p.key.Kind() {
	case clientkey.IP:
		key = peerIP
	case clientkey.Header:
		key = string(HeaderKeyView(p.key, h.All()))
	}
	bal := p.balancer(key)
	i := bal.Pick(key, start)
	if i == balance.NoBackend {
		return lc // serve answers it, on the worker
	}
	lc.be = p.backends[i]
	lc.be.requests.Inc()
	lc.pk, lc.slot = newPick(p, bal, i, start, slot), nil
	up := lc.be.up
	x := lc.x()
	c := x.takeIdle(cc)
	if c == nil || c.fd < 0 {
		if c != nil {
			up.conns.put(c)
		}
		return lc // the worker waits or dials, as any request does
	}
	lc.req.Reset()
	p.copyLoopHead(h, peer, cc.IsTLS(), &lc.req, in.Trace)
	p.headExtras(&lc.req, in)
	lc.out = lc.req.AppendBytes(lc.out[:0])
	c.startRequest()
	c.stats.exchanges.Add(1)
	n, errno := sockio.WriteNow(c.fd, lc.out)
	if errno != 0 || n != len(lc.out) {
		// A socket that does not take a short head at once: the worker
		// sends it on another. What went out is a head cut short, which
		// the backend's close discards.
		x.close(c)
		return lc
	}
	lc.c, lc.end, lc.keep = c, 0, true
	if up.Fast.ReadTimeout > 0 {
		lc.deadline = time.Now().Add(up.Fast.ReadTimeout)
	}
	return lc
}

// x is the exchange on the connections of lc's backend (set while c is).
func (lc *LoopCall) x() *exchange { return exchangeOf(lc.be.up.Fast) }

// Fd is the socket the loop watches for the answer, -1 if the call goes to
// a worker at once.
func (lc *LoopCall) Fd() int {
	if lc.c == nil {
		return -1
	}
	return lc.c.fd
}

// Registration is the connection's place in a loop's epoll set, for the
// loop's Watch.
func (lc *LoopCall) Registration() *h1loop.Registration { return &lc.c.reg }

// Timeout is how long the loop waits, from now, for what it reads next (0:
// no bound): the answer's head within response_header_timeout of the
// request, as the exchange reads it, and once the head is in, each read of
// the body within that timeout of the one before, as backendConn reads a
// body. The loop asks again after each read (LoopMore).
func (lc *LoopCall) Timeout() time.Duration {
	switch {
	case lc.end > 0:
		return lc.c.timeout
	case lc.deadline.IsZero():
		return 0
	}
	return max(time.Until(lc.deadline), time.Millisecond)
}

// TimedOut hands on a call whose Timeout passed: the exchange, on the
// worker, fails its next read of the socket at once (as its own deadline
// would have) rather than waiting as long again.
func (lc *LoopCall) TimedOut() {
	if lc.c != nil && lc.end > 0 {
		lc.c.expired = true // the head's deadline has passed already
	}
}

// LoopState is what Read found.
type LoopState uint8

const (
	LoopMore   LoopState = iota // nothing whole yet: the loop waits on
	LoopAnswer                  // a whole, plain answer: Answer writes it
	LoopResume                  // anything else: the call goes to a worker
)

// Read reads what the backend sent, in the loop, and says what comes next.
// The loop's watch is edge-triggered: it reads until it has what it needs
// or the socket has no more (EAGAIN).
func (lc *LoopCall) Read() LoopState {
	if cap(lc.buf) == 0 {
		lc.buf = make([]byte, 0, loopHeadMax)
	}
	for {
		if len(lc.buf) == cap(lc.buf) {
			if cap(lc.buf) >= loopMax {
				return LoopResume
			}
			lc.buf = append(lc.buf, make([]byte, min(2*cap(lc.buf), loopMax)-len(lc.buf))...)[:len(lc.buf)]
		}
		n, errno := sockio.ReadNow(lc.c.fd, lc.buf[len(lc.buf):cap(lc.buf)])
		switch {
		case errno == syscall.EAGAIN:
			return LoopMore
		case errno != 0 || n <= 0:
			if len(lc.buf) == 0 {
				// Closed, or failed, before a byte of the answer: a kept-alive
				// connection the backend closed under the request. The worker
				// sends it again on a fresh one, as HostClient.Do retries an
				// idempotent request (a GET or a HEAD: StartLoop's).
				lc.x().close(lc.c)
				lc.c = nil
			}
			return LoopResume // the exchange reads the same end and answers for it
		}
		lc.buf = lc.buf[:len(lc.buf)+n]
		if st := lc.frame(); st != LoopMore {
			return st
		}
	}
}

// frame looks at the answer read so far.
func (lc *LoopCall) frame() LoopState {
	if lc.end == 0 {
		end, err := scanHead(lc.buf)
		if err != nil || end > loopHeadMax || end == 0 && len(lc.buf) >= loopHeadMax {
			return LoopResume // the exchange refuses it
		}
		if end == 0 {
			return LoopMore
		}
		if lc.br == nil {
			lc.br = bufio.NewReaderSize(&lc.rd, loopHeadMax)
		}
		lc.rd.Reset(lc.buf[:end])
		lc.br.Reset(&lc.rd)
		lc.resp.Header.DisableNormalizing()
		if lc.resp.Header.Read(lc.br) != nil {
			return LoopResume
		}
		lc.end = end
		code := lc.resp.StatusCode()
		if code < 200 || lc.p.retry.enabled(len(lc.p.backends)) && lc.p.retry.on(code) {
			return LoopResume // interim, 101, or a status the app tries again
		}
		lc.keep = !lc.resp.Header.ConnectionClose()
	}
	body := len(lc.buf) - lc.end
	code := lc.resp.StatusCode()
	switch n := lc.resp.Header.ContentLength(); {
	case code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified || lc.head && n >= 0:
		if body > 0 {
			return LoopResume // a body where there is none: unclean
		}
	case n < 0 || lc.end+n > loopMax || body > n:
		return LoopResume // chunked, to the close, long, or followed by more
	case body < n:
		return LoopMore
	}
	return LoopAnswer
}

// Answer copies the answer's status, end-to-end fields and body into out,
// as the forward core passes an answer on (copyResponse). The body is a
// view of the call's buffer, valid until Done.
func (lc *LoopCall) Answer(out *fasthttp.Response) {
	copyResponse(out, &lc.resp)
	if !lc.head {
		out.SetBodyRaw(lc.buf[lc.end:])
	}
}

// Done ends a call the loop answered (status: what went to the client): the
// connection goes back to the pool, kept alive if the exchange allows it,
// and the slot is given back.
func (lc *LoopCall) Done(status int) {
	lc.x().putBack(lc.c, lc.keep)
	lc.c = nil
	lc.pk.code = status
	lc.pk.Release()
	lc.free()
}

// Abort ends a call the loop will not finish (the loop stopped): the
// connection closes, and the slot is given back unanswered.
func (lc *LoopCall) Abort() {
	if lc.c != nil {
		lc.x().close(lc.c)
		lc.c = nil
	}
	if lc.pk != nil {
		lc.pk.Release()
	} else {
		admit.Release(lc.slot, 0)
	}
	lc.free()
}

func (lc *LoopCall) free() {
	lc.resp.Reset()
	if cap(lc.buf) > loopHeadMax {
		lc.buf = nil // a long answer's buffer is not kept
	}
	lc.p, lc.be, lc.pk, lc.slot, lc.c = nil, nil, nil, nil, nil
	lc.buf, lc.out, lc.end, lc.deadline, lc.keep, lc.head = lc.buf[:0], lc.out[:0], 0, time.Time{}, false, false
	lc.rd.Reset(nil)
	loopCalls.Put(lc)
}

// resume is serve for a call the loop handed on: the forward core goes on
// from where the loop left it, on the worker.
func (p *Pool) resume(d downstream, lc *LoopCall, in Body, sh *shape.Checker) {
	pk, be, c, slot := lc.pk, lc.be, lc.c, lc.slot
	if c != nil {
		c.pre = append(c.pre[:0], lc.buf...) // read again by the exchange, first
		in.sent = &sentCall{c: c, deadline: lc.deadline}
	}
	lc.c, lc.pk = nil, nil
	lc.free()
	if pk == nil {
		p.serve(d, in, sh, slot)
		return
	}
	p.forward(d, be, in, sh, pk)
}

// sentCall is a request written by a loop, whose answer the exchange
// reads (exchange.readResponse) instead of taking a connection and
// writing.
type sentCall struct {
	c        *backendConn // of the pool of the backend the call resumes on
	deadline time.Time
}

// read reads the answer to out, written by the loop on hc's connection
// s.c, as RoundTrip reads one (HostClient.Do's end included: a close
// before the first byte is ErrConnectionClosed).
func (s *sentCall) read(hc *fasthttp.HostClient, out *fasthttp.Request, resp *fasthttp.Response) error {
	resp.Reset()
	resp.ParseNetConn(s.c)
	_, err := exchangeOf(hc).readResponse(hc, s.c, out, resp, out.Header.IsHead(), s.deadline, nil)
	if err == io.EOF {
		err = fasthttp.ErrConnectionClosed
	}
	return err
}

// copyLoopHead is copyRequestTraced for the event loop's head (simple: no
// upgrade, no body, Connection only "close" or "keep-alive"), of a client
// connection that is TLS or not.
func (p *Pool) copyLoopHead(h *h1loop.Head, peer netip.Addr, tls bool, out *fasthttp.RequestHeader, tc TraceHeaders) {
	out.DisableNormalizing()
	out.SetNoDefaultContentType(true)
	out.SetMethodBytes(h.Method)
	out.SetRequestURIBytes(h.Target)
	var conn connTokens
	for k, v := range h.All() {
		if ascii.EqualFold(k, "Connection") {
			conn.add(v)
		}
	}
	for k, v := range h.All() {
		copyField(out, k, v, requestField(k, &conn, false, &tc), func() bool {
			return peer.IsValid() && p.trust.trusted(peer)
		})
	}
	if tc.Traceparent != nil {
		out.AddBytesV("traceparent", tc.Traceparent)
	}
	setForwarded(p.trust, out, peer, h.Host, tls, loopHeader{h})
}

// loopHeader reads the event loop's head's forwarding fields.
type loopHeader struct{ h *h1loop.Head }

func (f loopHeader) all(name string) string   { return allValues(f.h.All(), name) }
func (f loopHeader) first(name string) string { return firstValue(f.h.All(), name) }

// takeIdle takes an idle connection that a request may be written on
// (usable, as acquire) without waiting or dialling, one already in cc's
// loop's epoll set if it can: nil if none.
func (x *exchange) takeIdle(cc *h1loop.Conn) *backendConn {
	for {
		c := x.pool.takeIdle(func(c *backendConn) bool { return c.reg.In(cc) })
		if c == nil || x.usable(c) {
			return c
		}
	}
}
