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

// pollInterval is how often a waiting request probes its client's
// connection: a client that left is let go within about this long, at one
// syscall per interval per waiting request (50k/s for a full default queue
// of 1024), and only while it waits. It is wall-clock time, not the
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
// Watching costs a goroutine and a probe every pollInterval, so it starts
// only at the first call of Done, which only a caller about to wait makes
// (the queue, backend_limits, a catalog load); Err never starts it, so the
// fast paths check Err and a request that waits for nothing costs nothing
// more. The watcher runs until the client is gone, the server stops, or the
// request stops waiting (Pause) or ends (Finish), which join it. A later
// Done starts it again.
//
// Err may report the end a moment before Done is closed, never after. The
// zero value is ready once Bind gives it its request; it is not copied
// once used.
type PeerCtx struct {
	c Peer
	// watched is set by the first Done: pause and finish have work then.
	watched atomic.Bool
	// gone is set, before cancel is closed, once the client has left.
	gone atomic.Bool

	mu     sync.Mutex
	inited bool            // done is set
	done   <-chan struct{} // what Done returns: cancel, or the RequestCtx's Done when the conn cannot be probed
	cancel chan struct{}   // closed by a watcher when the client has gone or the server stops
	ended  bool            // cancel is closed
	stop   chan struct{}   // closed to end the running watcher; nil when none runs
	exited chan struct{}   // closed by the running watcher as it returns
	raw    syscall.RawConn
}

var _ context.Context = (*PeerCtx)(nil)

// Bind makes p the context of request c; p is new, or Finished.
func (p *PeerCtx) Bind(c Peer) { p.c = c }

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

// Done starts the watcher if none runs, and returns the channel it closes.
func (p *PeerCtx) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inited {
		p.inited = true
		p.watched.Store(true)
		if p.raw = rawConn(p.c.Conn()); p.raw == nil {
			p.done = p.c.Done() // nothing to probe: it ends with the server only
			return p.done
		}
		p.cancel = make(chan struct{})
		p.done = p.cancel
	}
	if p.cancel != nil && !p.ended && p.stop == nil {
		p.stop, p.exited = make(chan struct{}), make(chan struct{})
		go p.watch(p.c.Done(), p.stop, p.exited)
	}
	return p.done
}

// watch probes the connection now and every pollInterval until the client
// has gone or the server stops (either ends the context) or stop is closed.
func (p *PeerCtx) watch(shutdown <-chan struct{}, stop, exited chan struct{}) {
	defer close(exited)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if peerGone(p.raw) {
			p.end(true)
			return
		}
		select {
		case <-t.C:
		case <-stop:
			return
		case <-shutdown:
			p.end(false)
			return
		}
	}
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

// Pause ends the watcher, if one runs, and waits for it to return: the
// request no longer waits. An atomic load when Done was never called.
func (p *PeerCtx) Pause() {
	if !p.watched.Load() {
		return
	}
	p.mu.Lock()
	stop, exited := p.stop, p.exited
	p.stop, p.exited = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-exited
	}
}

// Finish is Pause at the end of the request, and readies p for the next.
func (p *PeerCtx) Finish() {
	if p.watched.Load() {
		p.Pause()
		*p = PeerCtx{}
	}
	p.c = nil
}

// rawConn finds the TCP socket under a connection, through levee's
// wrappers and TLS; nil when there is none or the OS has no probe.
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
	for ; c != nil; c = under(c) {
		if v, ok := c.(*Conn); ok {
			v.Linger()
			return
		}
	}
}
