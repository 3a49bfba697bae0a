package server

import (
	"bytes"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// The event loop runs the steps of serve that never wait itself: the
// route from the catalog in memory, the limits of the head (check) and
// the start of admission: a free slot, a refusal or a place in the queue
// (Gate.Begin). A request they refuse is answered in the loop, with one
// write and no goroutine: under overload refusals are most of the
// traffic, and on a core shared with the backend what each costs is the
// backend's. A request they let through goes on at pass, on a worker
// (servePassed). Whatever could wait (a route the lazy catalog must load,
// a rate shared through Redis, a write to an access log of the caller's),
// or is not every request's (an ACME challenge, the drain), goes to the
// worker whole, and serve runs there as on fasthttp. The wait in the
// admission queue is the worker's too (Gate.Finish). A trace begins in
// the loop, and goes on with the request (checkedReq.tr); its export is
// the exporter's queue's, which never blocks.

// checkedReq is a request the loop routed, checked and began to admit:
// where serve resumes.
type checkedReq struct {
	snap  *snapshot
	rt    *route
	start time.Time
	p     limits.Passed
	adm   admission
	tr    trace.Request // begun in the loop, with the stages it marked
	// sh and out are what pass handed forward, for a request the loop
	// forwarded and hands on (out.loop: forwardInLoop).
	sh  *limits.PathShape
	out toBackend
}

// admission is an admission the loop began (limits.Gate.Begin) for t: a
// slot taken or a place in the queue, which enter ends (used) or pass
// cancels.
type admission struct {
	t    admit.Ticket
	p    admit.Pending
	used bool
}

// begun: a is an admission begun and not yet used.
func (a *admission) begun() bool { return a != nil && a.p != (admit.Pending{}) && !a.used }

// cancel gives back what a holds, if it was not used.
func (a *admission) cancel() {
	if a.begun() {
		a.used = true
		a.p.Cancel(a.t)
	}
}

// servePassed is serve from pass on, for a request the loop checked.
func servePassed[E exchange](s *Server, e E, r *checkedReq) {
	tr := resumeTrace(e, &r.tr)
	defer finish(s, r.snap, r.rt, e, r.start)
	if r.out.loop != nil {
		// The loop passed it and began forwarding it: the forward core
		// goes on from there (the call holds the slot).
		out := r.out
		r.out.loop = nil
		e.forward(r.rt, r.sh, nil, out)
		return
	}
	pass(s, r.rt, e, r.start, tr, r.p, &r.adm)
}

// front runs route, check and the start of admission for h in the loop.
// answered: it wrote the answer of a refusal (v says what the loop does
// next); otherwise, if r.rt is set, the request passed and goes on at
// pass, and if not, the worker serves it whole.
func (e *loopEngine) front(c *h1loop.Conn, sock *loopSocket, h *h1loop.Head, r *checkedReq) (v h1loop.Verdict, answered bool) {
	s := e.s
	snap := s.current.Load()
	// A log write may block, and the loop must not: with an access log
	// other than the one into the bounded queue (Options.AccessLog),
	// requests go to the worker. So do the drain's and ACME's.
	if snap.access.On() && !s.accessQueued || s.draining.Load() ||
		s.acme != nil && bytes.HasPrefix(h.Path, acmeChallengePath) {
		return 0, false
	}
	rt, ok := snap.catalog.Lookup(b2s(h.Host), b2s(h.Path))
	if !ok && s.lazy != nil {
		return 0, false // the store may know it
	}
	if ok && !rt.inLoop {
		return 0, false
	}
	if c.Requests == 1 {
		netlimit.Started(sock.nc) // see AwaitFirstRequests
	}
	x := loopHeads.Get().(*loopHead)
	defer x.free()
	x.h, x.sock = h, sock
	if !ok {
		// Never an open proxy: a host no app claims gets a short 404.
		x.refuse(noRoute)
		s.unrouted.Observe(http.StatusNotFound, 0)
		return x.answer(c), true
	}
	start := s.clk.Now()
	tr := beginTrace(snap, x, start)
	p, ok := check(rt, x, start, tr)
	if ok {
		// The admission, as far as it goes without a wait: a slot, a
		// refusal, or a place in the queue, whose wait the worker does.
		adm := admission{t: rt.Ticket(x.Path(), p.Client)}
		var ref limits.Refusal
		if adm.p, ref, ok = rt.Begin(adm.t); ok {
			*r = checkedReq{snap: snap, rt: rt, start: start, p: p, adm: adm, tr: x.tr}
			return 0, false
		}
		if ref = s.unanswered(ref, true, c.Requests > 1); ref.Code == 0 {
			x.left = true // sealed, and the client sends it again by itself
		} else {
			x.refuse(ref)
		}
	}
	return x.end(s, snap, rt, start, c), true
}

// end ends x, routed to rt, in the loop, where it was refused or its
// client left: it is accounted and its trace ended (finish), then its
// answer goes out on c, or the connection closes if no one is left to
// answer. Both front and forwardInLoop end a refusal so.
func (x *loopHead) end(s *Server, snap *snapshot, rt *route, start time.Time, c *h1loop.Conn) h1loop.Verdict {
	finish(s, snap, rt, x, start)
	if x.left {
		return h1loop.Close
	}
	return x.answer(c)
}

// loopHead is a request in the loop as check and account read it and
// front answers it: views of the loop's buffer, valid while Request runs.
type loopHead struct {
	h    *h1loop.Head
	sock *loopSocket
	fwd  *loopFwd // the loop forwards it (forwardInLoop)
	left bool     // closed unanswered: status 499, as fastExchange.gone
	resp fasthttp.Response
	out  []byte
	tr   trace.Request
	in   trace.Incoming
}

var loopHeads = sync.Pool{New: func() any { return new(loopHead) }}

func (x *loopHead) free() {
	x.h, x.sock, x.left = nil, nil, false
	x.resp.Reset()
	if cap(x.out) > 4<<10 {
		x.out = nil
	}
	loopHeads.Put(x)
}

func (x *loopHead) Path() string        { return b2s(x.h.Path) }
func (x *loopHead) Target() string      { return b2s(x.h.Target) }
func (x *loopHead) host() string        { return b2s(x.h.Host) }
func (x *loopHead) Headers() (int, int) { return headerSize(x.h.All()) }
func (x *loopHead) method() string      { return string(x.h.Method) }
func (x *loopHead) remote() string      { return x.sock.remote.String() }

// ContentLength is as fastExchange's reads fasthttp's: a simple head has
// no body, and says so with Content-Length: 0 or with nothing (-1).
func (x *loopHead) ContentLength() int64 {
	if x.h.Length {
		return 0
	}
	return -1
}

// ClientKey is as forward.FastKey reads it (a limit's key is the peer's
// address or a header: config.Validate refuses a cookie).
func (x *loopHead) ClientKey(k clientkey.Source) string {
	switch k.Kind() {
	case clientkey.IP:
		return x.sock.nc.PeerIP()
	case clientkey.Header:
		return string(forward.HeaderKeyView(k, x.h.All()))
	}
	return ""
}

func (x *loopHead) TopKey(k clientkey.Source) string {
	if k.IsHeader() {
		if v := forward.HeaderKeyView(k, x.h.All()); len(v) > 0 {
			return b2s(v)
		}
	}
	return x.sock.nc.PeerIP()
}

func (x *loopHead) traceState() *trace.Request { return &x.tr }

func (x *loopHead) incomingTrace() trace.Incoming {
	incomingOf(&x.in, x.h.All())
	return x.in
}

// describe is as fastExchange's reads the same request.
func (x *loopHead) describe(sp *trace.Span) trace.HTTPServer {
	v := trace.HTTPServer{Method: b2s(x.h.Method), Path: x.Path(), Scheme: "http", Host: x.host(),
		Proto: "1.1", Reject: b2s(x.resp.Header.Peek(reply.Reject)), Error: b2s(x.resp.Header.Peek(reply.Error)),
		Client: x.sock.nc.PeerIP()}
	if x.sock.c.IsTLS() {
		v.Scheme = "https"
	}
	if x.h.HTTP10 {
		v.Proto = "1.0"
	}
	for k, val := range x.h.All() {
		if ascii.EqualFold(k, "user-agent") {
			v.UserAgent = b2s(val) // the last, as fasthttp keeps it
		}
	}
	addTraceStates(sp, &x.tr, x.h.All())
	return v
}

func (x *loopHead) refuse(ref limits.Refusal)      { fillRefusal(&x.resp, &ref) }
func (x *loopHead) refuseShape(v *shape.Violation) { fastreply.FillViolation(&x.resp, v, false) }
func (x *loopHead) status() int {
	if x.left {
		return StatusClientClosed
	}
	return x.resp.StatusCode()
}
func (x *loopHead) rejected() bool       { return len(x.resp.Header.Peek(reply.Reject)) > 0 }
func (x *loopHead) rejectReason() string { return string(x.resp.Header.Peek(reply.Reject)) }
func (x *loopHead) bytes() uint64        { return uint64(len(x.resp.Body())) }
func (x *loopHead) items() uint64        { return 0 }

// answer writes x's response on c as fasthttp's server writes the same
// response to the same request: its connection header (close, or HTTP/1.0's
// keep-alive), no body to a HEAD, Content-Length and Date. A test holds
// the two to the same bytes (TestLoopAnswersAsFasthttp).
func (x *loopHead) answer(c *h1loop.Conn) h1loop.Verdict {
	closing := x.appendAnswer(true)
	c.Answer(x.out)
	if closing {
		return h1loop.Close // lingering, as netlimit.Linger on fasthttp
	}
	return h1loop.Answered
}

// appendAnswer writes x.resp into x.out as fasthttp's server writes it, and
// reports whether the connection closes after it. length: its length is
// its body's (levee's own answer); else it is as the response has it (a
// backend's, whose answer to a HEAD has a length and no body).
func (x *loopHead) appendAnswer(length bool) (closing bool) {
	resp := &x.resp
	closing = x.h.Close || resp.Header.ConnectionClose()
	if closing {
		resp.Header.SetConnectionClose()
	} else if x.h.HTTP10 {
		resp.Header.Set("Connection", "keep-alive")
	}
	resp.SkipBody = string(x.h.Method) == http.MethodHead
	body := resp.Body()
	if length {
		resp.Header.SetContentLength(len(body))
	}
	x.out = resp.Header.AppendBytes(x.out[:0])
	if !resp.SkipBody {
		x.out = append(x.out, body...)
	}
	return closing
}
