package server

import (
	"context"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/limits"
)

// The event loop forwards a request itself when nothing on its way can
// wait (issue 19): a GET or HEAD that front admitted to a free slot, of a
// route whose every step is the loop's (inLoop, no backend_limits guard,
// no batch shadow) and whose pool lets a loop forward (no bandwidth limit,
// HTTP/1.1 backends kept alive: forward.Pool.ForwardsFromLoop). The loop
// runs pass as a worker would, then the forward core's start
// (forward.Pool.StartLoop): the request's head goes out on an idle backend
// connection, whose socket the loop then watches. An answer that comes
// whole and plain is written by the loop (Conn.Reply) and accounted
// there; any other, or none in time, goes to a worker, which goes on
// where the loop left it (servePassed, forward.Body.Loop). No goroutine
// is woken for the request that needs none, which on a core shared with
// the backend is most of what a proxied request costs
// (docs/benchmarks.md, "The floor of forwarding from the loop").

// loopFwd is one request the loop forwards.
type loopFwd struct {
	e    *loopEngine
	c    *h1loop.Conn
	x    loopHead    // the request as serve's steps read it, over head
	head h1loop.Head // the loop's head, copied: the loop reads into its buffer again
	raw  []byte      // what head's views are into
	r    checkedReq  // where the request stands
	call *forward.LoopCall
	w    h1loop.Watch
	on   func(h1loop.Event) // event, made once
}

var loopFwds = sync.Pool{New: func() any { return new(loopFwd) }}

// forwardsInLoop reports whether the loop forwards h, admitted as r says.
func forwardsInLoop(h *h1loop.Head, r *checkedReq) bool {
	return r.rt != nil && r.rt.loopForward && !r.adm.p.Queued() &&
		(string(h.Method) == "GET" || string(h.Method) == "HEAD")
}

// forwardInLoop serves h, which front admitted (r), from the loop.
func (e *loopEngine) forwardInLoop(c *h1loop.Conn, sock *loopSocket, h *h1loop.Head, r *checkedReq) h1loop.Verdict {
	s := e.s
	f := loopFwds.Get().(*loopFwd)
	if f.on == nil {
		f.on = f.event
	}
	f.e, f.c, f.r = e, c, *r
	f.raw = h.CopyTo(&f.head, f.raw)
	x := &f.x
	x.h, x.sock, x.fwd = &f.head, sock, f
	tr := resumeTrace(x, &f.r.tr)
	pass(s, f.r.rt, x, f.r.start, tr, f.r.p, &f.r.adm)
	if f.call == nil {
		// Refused on the way (its deadline passed): answered here, as
		// front answers.
		v := x.end(s, f.r.snap, f.r.rt, f.r.start, c)
		f.free()
		return v
	}
	if fd := f.call.Fd(); fd >= 0 && c.Watch(&f.w, f.call.Registration(), fd, f.call.Timeout(), f.on) == nil {
		return h1loop.Held
	}
	f.resume()
	return h1loop.Held
}

// event is the backend socket's, in the loop.
func (f *loopFwd) event(ev h1loop.Event) {
	switch ev {
	case h1loop.Readable:
		switch f.call.Read() {
		case forward.LoopMore:
			f.w.SetTimeout(f.call.Timeout())
			return
		case forward.LoopAnswer:
			f.w.Unwatch()
			f.answer()
			return
		}
	case h1loop.Stopped:
		// The loop stopped under the request: no one will answer it.
		f.call.Abort()
		f.call = nil
		f.x.left = true
		finish(f.e.s, f.r.snap, f.r.rt, &f.x, f.r.start)
		f.c.Release(h1loop.Drop)
		f.free()
		return
	}
	if ev == h1loop.TimedOut {
		f.call.TimedOut()
	}
	f.w.Unwatch() // timed out, or an answer for the forward core
	f.resume()
}

// answer writes the backend's answer from the loop, and ends the request.
func (f *loopFwd) answer() {
	x := &f.x
	f.call.Answer(&x.resp)
	closing := x.appendAnswer(false)
	code := finish(f.e.s, f.r.snap, f.r.rt, x, f.r.start)
	f.call.Done(code)
	f.call = nil
	mode := h1loop.Keep
	if closing {
		mode = h1loop.Linger // as netlimit.Linger on fasthttp
	}
	f.c.Reply(x.out, mode)
	f.free()
}

// resume hands the request to a worker, which serves it on fasthttp from
// where the loop left it: the forward core goes on with the call.
func (f *loopFwd) resume() {
	e := f.e
	req := loopReqs.Get().(*loopReq)
	req.e, req.sock, req.off, req.next, req.pre = e, f.x.sock, 0, false, f.r
	req.pre.tr = f.x.tr
	req.pre.out.loop, f.call = f.call, nil
	req.head = append(req.head[:0], f.raw...)
	req.refs.Store(2)
	req.closed.Store(false)
	f.free()
	e.workers.submit(req)
}

func (f *loopFwd) free() {
	f.x.h, f.x.sock, f.x.fwd, f.x.left = nil, nil, nil, false
	f.x.resp.Reset()
	if cap(f.x.out) > 4<<10 {
		f.x.out = nil
	}
	if cap(f.raw) > 8<<10 {
		f.raw = nil
	}
	f.e, f.c, f.r, f.call = nil, nil, checkedReq{}, nil
	loopFwds.Put(f)
}

// What pass needs of a loop request beside what front read (loopfront.go):
// it has no body, and it never waits (its slot is taken: forwardsInLoop).

func (x *loopHead) ctx() context.Context              { return context.Background() }
func (x *loopHead) waitCtx(time.Time) context.Context { return context.Background() }
func (x *loopHead) readAhead() ([]byte, bool)         { return nil, true }
func (x *loopHead) gone()                             { x.left = true }
func (x *loopHead) reused() bool                      { return x.sock.c.Requests > 1 }
func (x *loopHead) readBody(*Server, *route, *limits.PathShape) (limits.Refusal, bool) {
	return limits.Refusal{}, true
}

// clientTimeout is fastExchange's, read from the loop's fields.
func (x *loopHead) clientTimeout(header string) (time.Duration, bool) {
	return clientTimeoutOf(x.h.All(), header)
}

// forward starts the call the loop watches (forwardInLoop).
func (x *loopHead) forward(rt *route, sh *limits.PathShape, slot admit.Releaser, out toBackend) {
	body := forward.Body{Shadow: out.shadow.Header(), Deadline: out.deadline,
		Trace: forward.TraceHeaders{Traceparent: x.tr.Traceparent(), DropTracestate: x.tr.DropTracestate()}}
	peer := x.sock.nc.Peer()
	f := x.fwd
	f.r.sh, f.r.out = sh, out
	f.call = rt.pool.StartLoop(x.sock.c, x.h, peer, x.sock.nc.PeerIP(), body, slot)
}
