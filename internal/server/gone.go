package server

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/netlimit"
)

// pollInterval is how often a waiting fasthttp request probes its client's
// connection: a client that left is let go within about this long, at one
// syscall per interval per waiting request (50k/s for a full default queue
// of 1024), and only while it waits. It is wall-clock time, not the
// server's clock: it paces a probe of the socket, not a limit, and a fake
// clock would never see a test's client leave.
const pollInterval = 20 * time.Millisecond

// peerCtx is the context of a request on fasthttp: it ends when the server
// shuts down (the RequestCtx's Done) or when the client has closed or reset
// its connection. While the handler runs fasthttp reads nothing from the
// connection, so nothing else would notice a client that left; net/http
// notices by its background read.
//
// Watching costs a probe every pollInterval, so it starts only at the
// first call of Done, which only a caller about to wait makes (the queue,
// backend_limits, a catalog load); Err never starts it, so the fast paths
// check Err and a request that waits for nothing costs nothing more. The
// probes are the server's peerWatch's: one goroutine for every waiting
// request, so a queue of a thousand costs no goroutine, timer or wake-up
// of its own per request. The request is watched until the client is gone,
// the server stops, or the request stops waiting (pause) or ends (finish).
// A later Done watches it again.
//
// Err may report the end a moment before Done is closed, never after. The
// zero value with c and w set is ready; it is not copied once used.
type peerCtx struct {
	c *fasthttp.RequestCtx
	w *peerWatch // the server's
	// watched is set by the first Done: pause and finish have work then.
	watched atomic.Bool
	// gone is set, before cancel is closed, once the client has left.
	gone atomic.Bool

	mu       sync.Mutex
	inited   bool            // done is set
	done     <-chan struct{} // what Done returns: cancel, or the RequestCtx's Done when the conn cannot be probed
	cancel   chan struct{}   // closed by the watch when the client has gone or the server stops
	ended    bool            // cancel is closed
	listed   bool            // in w's list
	shutdown <-chan struct{} // the RequestCtx's Done: the server is stopping
	raw      syscall.RawConn
}

var _ context.Context = (*peerCtx)(nil)

func (p *peerCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (p *peerCtx) Value(key any) any           { return p.c.Value(key) }

// Err is context.Canceled once the client has gone or the server is
// shutting down; it makes no syscall and starts nothing.
func (p *peerCtx) Err() error {
	if p.gone.Load() {
		return context.Canceled
	}
	return p.c.Err()
}

// Done lists the request with the server's watch if it is not, and
// returns the channel the watch closes.
func (p *peerCtx) Done() <-chan struct{} {
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
func (p *peerCtx) end(gone bool) {
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

// pause takes the request off the watch, if it is on it: the request no
// longer waits. Once it returns the watch does not touch p. An atomic load
// when Done was never called.
func (p *peerCtx) pause() {
	if !p.watched.Load() {
		return
	}
	p.w.remove(p)
	p.mu.Lock()
	p.listed = false
	p.mu.Unlock()
}

// finish is pause at the end of the request, and readies p for the next.
func (p *peerCtx) finish() {
	if p.watched.Load() {
		p.pause()
		*p = peerCtx{}
	}
	p.c, p.w = nil, nil
}

// peerWatch probes the connections of a server's waiting fasthttp
// requests (peerCtx.Done) every pollInterval, from one goroutine that runs
// while any request is listed and exits when none is. Lock order: the
// watch's mu, then a peerCtx's.
type peerWatch struct {
	mu      sync.Mutex
	peers   map[*peerCtx]uint64 // listed requests, by their listing's number
	seq     uint64              // the last listing's number
	running bool
	wg      sync.WaitGroup // the loop
}

// add lists p (its raw conn and shutdown set), starting the loop if it is
// not running.
func (w *peerWatch) add(p *peerCtx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.peers == nil {
		w.peers = make(map[*peerCtx]uint64)
	}
	w.seq++
	w.peers[p] = w.seq
	if !w.running {
		w.running = true
		w.wg.Go(w.loop)
	}
}

// remove takes p off the list; the loop does not touch it afterwards.
func (w *peerWatch) remove(p *peerCtx) {
	w.mu.Lock()
	delete(w.peers, p)
	w.mu.Unlock()
}

// wait joins the loop: it exits at the first tick with no request listed,
// and every request leaves the list by its end.
func (w *peerWatch) wait() { w.wg.Wait() }

// watched is a listed request as the loop probes it: what it needs of p,
// copied under w.mu, since p is reset for its next request once removed.
type watched struct {
	p        *peerCtx
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
func (w *peerWatch) loop() {
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

// rawConn finds the TCP socket under a connection fasthttp serves, through
// levee's wrappers and TLS; nil when there is none or the OS has no probe.
func rawConn(c net.Conn) syscall.RawConn {
	if !canProbe {
		return nil
	}
	for ; c != nil; c = under(c) {
		if v, ok := c.(*net.TCPConn); ok {
			raw, err := v.SyscallConn()
			if err != nil {
				return nil
			}
			return raw
		}
	}
	return nil
}

// under is the connection c wraps: through levee's wrappers and TLS; nil
// at the socket, or at a kind levee does not make.
func under(c net.Conn) net.Conn {
	switch v := c.(type) {
	case *netlimit.Conn:
		return v.Conn
	case *replayConn:
		return v.Conn
	case *tls.Conn:
		return v.NetConn()
	}
	return nil
}

// linger makes the close of c, a connection levee answers and closes
// without having read all of its request, a lingering one
// (netlimit.Conn.Linger), so the client reads the answer.
func linger(c net.Conn) {
	for ; c != nil; c = under(c) {
		if v, ok := c.(*netlimit.Conn); ok {
			v.Linger()
			return
		}
	}
}
