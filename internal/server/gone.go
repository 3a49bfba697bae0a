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
// Watching costs a goroutine and a probe every pollInterval, so it starts
// only at the first call of Done, which only a caller about to wait makes
// (the queue, backend_limits, a catalog load); Err never starts it, so the
// fast paths check Err and a request that waits for nothing costs nothing
// more. The watcher runs until the client is gone, the server stops, or the
// request stops waiting (pause) or ends (finish), which join it. A later
// Done starts it again.
//
// Err may report the end a moment before Done is closed, never after. The
// zero value with c set is ready; it is not copied once used.
type peerCtx struct {
	c *fasthttp.RequestCtx
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

// Done starts the watcher if none runs, and returns the channel it closes.
func (p *peerCtx) Done() <-chan struct{} {
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
func (p *peerCtx) watch(shutdown <-chan struct{}, stop, exited chan struct{}) {
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

// pause ends the watcher, if one runs, and waits for it to return: the
// request no longer waits. An atomic load when Done was never called.
func (p *peerCtx) pause() {
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

// finish is pause at the end of the request, and readies p for the next.
func (p *peerCtx) finish() {
	if p.watched.Load() {
		p.pause()
		*p = peerCtx{}
	}
	p.c = nil
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
