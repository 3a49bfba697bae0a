package netlimit

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A client that left while its request waits (in the queue, for
// backend_limits, for a catalog load) is noticed by probing its socket.

// pollInterval is how often a waiting request's client's connection is
// probed: a client that left is let go within about this long, at one
// syscall per interval per waiting request (50k/s for a full default queue
// of 1024, from one goroutine), and only while it waits. It is wall-clock time, not the
// server's clock: it paces a probe of the socket, not a limit, and a fake
// clock would never see a test's client leave.
const pollInterval = 20 * time.Millisecond

// Peer is the request a PeerCtx watches the client of: its own context,
// which ends when the server shuts down, and the connection it came on.
// *fasthttp.RequestCtx is one.
type Peer interface {
	context.Context
	Conn() net.Conn
}

// PeerCtx is the context of a request on an engine that reads nothing
// from the connection while the handler runs (fasthttp): it ends when the
// server shuts down (the Peer's Done) or when the client has closed or
// reset its connection, which nothing else would notice; net/http notices
// by its background read.
//
// Watching costs a probe every pollInterval, so it starts only at the
// first call of Done, which only a caller about to wait makes (the queue,
// backend_limits, a catalog load); Err never starts it, so the fast paths
// check Err and a request that waits for nothing costs nothing more. The
// probes are the server's PeerWatch's: one goroutine for every waiting
// request, so a queue of a thousand costs no goroutine, timer or wake-up
// of its own per request. The request is watched until the client is gone,
// the server stops, or the request stops waiting (Pause) or ends (Finish).
// A later Done watches it again.
//
// Err may report the end a moment before Done is closed, never after. The
// zero value is ready once Bind gives it its request; it is not copied
// once used.
type PeerCtx struct {
	c Peer
	w *PeerWatch // the server's
	// watched is set by the first Done: pause and finish have work then.
	watched atomic.Bool
	// gone is set, before cancel is closed, once the client has left.
	gone atomic.Bool

	mu       sync.Mutex
	inited   bool            // done is set
	done     <-chan struct{} // what Done returns: cancel, or the Peer's Done when the conn cannot be probed
	cancel   chan struct{}   // closed by the watch when the client has gone or the server stops
	ended    bool            // cancel is closed
	listed   bool            // in w's list
	shutdown <-chan struct{} // the Peer's Done: the server is stopping
	raw      syscall.RawConn
}

var _ context.Context = (*PeerCtx)(nil)

// Bind makes p the context of request c, watched by w when it waits; p is
// new, or Finished.
func (p *PeerCtx) Bind(c Peer, w *PeerWatch) { p.c, p.w = c, w }

func (p *PeerCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (p *PeerCtx) Value(key any) any           { return p.c.Value(key) }

// Err is context.Canceled once the client has gone or the server is
// shutting down; it makes no syscall and starts nothing.
func (p *PeerCtx) Err() error {
	if p.gone.Load() {
		return context.Canceled
	}
	return p.c.Err()
}

// Done lists the request with its PeerWatch if it is not, and returns the
// channel the watch closes.
func (p *PeerCtx) Done() <-chan struct{} {
	p.mu.Lock()
	if !p.inited {
		p.inited = true
		p.watched.Store(true)
		if p.raw = rawConn(p.c.Conn()); p.raw == nil {
			p.done = p.c.Done() // nothing to probe: it ends with the server only
			p.mu.Unlock()
			return p.done
		}
		p.cancel = make(chan struct{})
		p.done = p.cancel
		p.shutdown = p.c.Done()
	}
	list := p.cancel != nil && !p.ended && !p.listed
	p.listed = p.listed || list
	done := p.done
	p.mu.Unlock()
	if list { // outside p.mu: the watch takes its own lock, then p's
		p.w.add(p)
	}
	return done
}

// end ends the context, once; gone says the client left.
func (p *PeerCtx) end(gone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if gone {
		p.gone.Store(true) // before the close: a woken waiter's Err sees it
	}
	p.ended = true
	close(p.cancel)
}

// Pause takes the request off the watch, if it is on it: the request no
// longer waits. Once it returns the watch does not touch p. An atomic load
// when Done was never called.
func (p *PeerCtx) Pause() {
	if !p.watched.Load() {
		return
	}
	p.w.remove(p)
	p.mu.Lock()
	p.listed = false
	p.mu.Unlock()
}

// Finish is Pause at the end of the request, and readies p for the next.
func (p *PeerCtx) Finish() {
	if p.watched.Load() {
		p.Pause()
		*p = PeerCtx{}
	}
	p.c, p.w = nil, nil
}

// PeerWatch probes the connections of a server's waiting requests
// (PeerCtx.Done) every pollInterval, from one goroutine that runs while
// any request is listed and exits when none is. The zero value is ready.
// Lock order: the watch's mu, then a PeerCtx's.
type PeerWatch struct {
	mu      sync.Mutex
	peers   map[*PeerCtx]uint64 // listed requests, by their listing's number
	seq     uint64              // the last listing's number
	running bool
	wg      sync.WaitGroup // the loop
}

// add lists p (its raw conn and shutdown set), starting the loop if it is
// not running.
func (w *PeerWatch) add(p *PeerCtx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.peers == nil {
		w.peers = make(map[*PeerCtx]uint64)
	}
	w.seq++
	w.peers[p] = w.seq
	if !w.running {
		w.running = true
		w.wg.Go(w.loop)
	}
}

// remove takes p off the list; the loop does not touch it afterwards.
func (w *PeerWatch) remove(p *PeerCtx) {
	w.mu.Lock()
	delete(w.peers, p)
	w.mu.Unlock()
}

// Watched is how many requests w watches now.
func (w *PeerWatch) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.peers)
}

// Wait joins the loop: it exits at the first tick with no request
// listed, and every request leaves the list by its end (or the server's).
func (w *PeerWatch) Wait() { w.wg.Wait() }

// watched is a listed request as the loop probes it: what it needs of p,
// copied under w.mu, since p is reset for its next request once removed.
type watched struct {
	p        *PeerCtx
	seq      uint64
	raw      syscall.RawConn
	shutdown <-chan struct{}
	gone     bool
}

// loop probes every listed request at each tick, ending (and unlisting)
// those whose client has gone or whose server is stopping, until the list
// is empty. It probes outside w.mu, from a copy, so that listing and
// removal never wait for a thousand probes; a probe of a connection
// closed meanwhile fails safely (RawConn.Control), and a request removed
// meanwhile, or listed again, is left alone (its number differs).
func (w *PeerWatch) loop() {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var batch, ended []watched
	for {
		w.mu.Lock()
		if len(w.peers) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		batch = batch[:0]
		for p, seq := range w.peers {
			batch = append(batch, watched{p: p, seq: seq, raw: p.raw, shutdown: p.shutdown})
		}
		w.mu.Unlock()
		ended = ended[:0]
		for _, e := range batch {
			select {
			case <-e.shutdown:
				ended = append(ended, e)
				continue
			default:
			}
			if peerGone(e.raw) {
				e.gone = true
				ended = append(ended, e)
			}
		}
		if len(ended) > 0 {
			w.mu.Lock()
			for _, e := range ended {
				if seq, ok := w.peers[e.p]; ok && seq == e.seq {
					e.p.end(e.gone)
					delete(w.peers, e.p)
				}
			}
			w.mu.Unlock()
		}
		clear(batch) // no request kept past its probe
		clear(ended)
		<-t.C
	}
}

// rawConn finds the socket under a connection, through levee's wrappers
// and TLS; nil when there is none or the OS has no probe.
func rawConn(c net.Conn) syscall.RawConn {
	if !canProbe {
		return nil
	}
	for ; c != nil; c = under(c) {
		// A *net.TCPConn, or a socket another engine holds (the event
		// loop's) that gives its descriptor the same way.
		if v, ok := c.(syscall.Conn); ok {
			raw, err := v.SyscallConn()
			if err != nil {
				return nil
			}
			return raw
		}
	}
	return nil
}

// under is the connection c wraps: a Conn's, or what a wrapper's NetConn
// returns (TLS, the server's replay of a sniffed preface); nil at the
// socket.
func under(c net.Conn) net.Conn {
	switch v := c.(type) {
	case *Conn:
		return v.Conn
	case interface{ NetConn() net.Conn }:
		return v.NetConn()
	}
	return nil
}

// Linger makes the close of c, a connection levee answers and closes
// without having read all of its request, a lingering one (Conn.Linger),
// so the client reads the answer; c is the Conn or a wrapper of it.
func Linger(c net.Conn) {
	if v := connOf(c); v != nil {
		v.Linger()
	}
}

// connOf is the Conn c is or wraps; nil if none.
func connOf(c net.Conn) *Conn {
	for ; c != nil; c = under(c) {
		if v, ok := c.(*Conn); ok {
			return v
		}
	}
	return nil
}
