package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/h2"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
)

// loopEngine serves a listener's HTTP/1.1 connections (plain or TLS) from event
// loops (server.event_loop, package h1loop). The loops read and parse,
// and run the steps that never wait, refusing there (front,
// loopfront.go); a request they let through is served by the listener's
// fasthttp server, on a pooled goroutine, as a connection of one request
// (loopReq), from where the loop left it. A request the loop does not
// take as simple hands its connection to that same server for the rest
// of its life.
type loopEngine struct {
	s       *Server
	l       *listener
	tcp     *net.TCPListener
	srv     *h1loop.Server
	workers loopWorkers
	local   net.Addr
	// serving counts the fasthttp ServeConn calls this engine began, so
	// shutdown waits for them.
	serving sync.WaitGroup
	// idle is the listener fasthttp serves, from which nothing comes.
	idle *connQueue
}

// newLoopEngine makes the loops of l, served from tcp; nil when ln is not
// a TCP listener or the system has no loop.
func (s *Server) newLoopEngine(cfg *config.Config, l *listener, ln net.Listener) (*loopEngine, error) {
	// The socket, bare, or under the upgrade's gate, whose pause then
	// pauses the loops' accepting too.
	tcp, ok := ln.(*net.TCPListener)
	gate, gated := ln.(interface {
		Listener() *net.TCPListener
		Attach(pause, resume func())
	})
	if gated {
		tcp, ok = gate.Listener(), true
	}
	if !ok || !h1loop.Supported {
		return nil, nil
	}
	sc := cfg.Server
	e := &loopEngine{s: s, l: l, tcp: tcp, local: ln.Addr(), idle: newConnQueue(ln.Addr())}
	// One loop per P: each reads, parses and refuses on whichever P the
	// runtime gives it, as the goroutines of the other engine do.
	srv, err := h1loop.New(h1loop.Options{Handler: e, MaxHead: int(sc.MaxHeaderBytes), Loops: runtime.GOMAXPROCS(0), TLS: l.tls,
		HeadTimeout: sc.ReadHeaderTimeout.D(), IdleTimeout: sc.IdleTimeout.D(), WriteTimeout: sc.WriteTimeout.D(),
		OnHeadTimeout: func(*h1loop.Conn) []byte {
			// As fastParseError answers a head that did not come in time.
			s.unrouted.Rejected(reply.RequestTimeout)
			return reply.Raw(reply.RequestTimeout)
		}})
	if err != nil {
		return nil, err
	}
	e.srv = srv
	if gated {
		gate.Attach(srv.PauseAccept, srv.ResumeAccept)
	}
	return e, nil
}

// serve runs the loops until they stop, and then waits for the
// connections handed to fasthttp.
func (e *loopEngine) serve() error {
	defer e.workers.close()
	// fasthttp stops only a server that serves a listener: this one
	// accepts nothing, so that Shutdown closes the idle connections it
	// serves and marks the answers in flight Connection: close.
	var fast sync.WaitGroup
	fast.Go(func() { e.l.h1.Serve(e.idle) })
	err := e.srv.Serve(e.tcp)
	e.idle.Close()
	fast.Wait()
	e.serving.Wait()
	if !errors.Is(err, h1loop.ErrClosed) {
		return err
	}
	return nil
}

// shutdown stops accepting and waits, until ctx ends, for the requests in
// flight: the loops' and those of connections handed to fasthttp.
func (e *loopEngine) shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	var e1, e2 error
	wg.Go(func() { e1 = e.srv.Shutdown(ctx) })
	// fasthttp then closes what it answers (CloseOnShutdown), and waits
	// for the connections it serves.
	wg.Go(func() { e2 = e.l.h1.ShutdownWithContext(ctx) })
	wg.Wait()
	return errors.Join(e1, e2)
}

// close stops the loops, closing what they hold.
func (e *loopEngine) close() {
	e.srv.Close()
	e.idle.Close()
}

// loopSocket is a loop connection as the rest of levee sees it, under the
// netlimit.Conn that counts it: writes go to the socket (the holder's),
// Close closes it through its loop, and reads are the loop's alone.
type loopSocket struct {
	c      *h1loop.Conn
	nc     *netlimit.Conn
	local  net.Addr
	remote *net.TCPAddr
	wdl    atomic.Int64 // write deadline, unix nanos; 0 none
}

var errLoopRead = errors.New("server: an event loop's connection is read by its loop")

func (s *loopSocket) Read([]byte) (int, error) { return 0, errLoopRead }
func (s *loopSocket) Write(p []byte) (int, error) {
	var dl time.Time
	if ns := s.wdl.Load(); ns != 0 {
		dl = time.Unix(0, ns)
	}
	return s.c.Write(p, dl)
}
func (s *loopSocket) Close() error                  { s.c.Kill(); return nil }
func (s *loopSocket) LocalAddr() net.Addr           { return s.local }
func (s *loopSocket) RemoteAddr() net.Addr          { return s.remote }
func (s *loopSocket) SetDeadline(t time.Time) error { return s.SetWriteDeadline(t) }
func (s *loopSocket) SetReadDeadline(time.Time) error {
	return nil // the loop keeps the read timeouts
}
func (s *loopSocket) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	s.wdl.Store(ns)
	return nil
}

// SyscallConn gives the socket to netlimit's probe of a waiting request's
// client (held: the descriptor is the request's).
func (s *loopSocket) SyscallConn() (syscall.RawConn, error) { return loopRaw{s.c}, nil }

type loopRaw struct{ c *h1loop.Conn }

func (r loopRaw) Control(f func(fd uintptr)) error  { r.c.Control(f); return nil }
func (r loopRaw) Read(func(fd uintptr) bool) error  { return errLoopRead }
func (r loopRaw) Write(func(fd uintptr) bool) error { return errLoopRead }

// Accepted counts c as the listener's accept counts a connection.
func (e *loopEngine) Accepted(c *h1loop.Conn) bool {
	ap := c.Peer()
	sock := &loopSocket{c: c, local: e.local, remote: net.TCPAddrFromAddrPort(ap)}
	nc, reason := e.l.ln.Adopt(sock)
	if reason != "" {
		c.Value = reason
		return false
	}
	sock.nc = nc
	c.Value = sock
	return true
}

// Closed gives the connection's place back.
func (e *loopEngine) Closed(c *h1loop.Conn) {
	if s, ok := c.Value.(*loopSocket); ok {
		s.nc.TakeLinger() // the loop lingered, if asked
		s.nc.Close()
	}
}

// Handoff serves on fasthttp a connection whose next request the loop
// does not take, or answers one refused at accept, or serves a TLS one
// that is not HTTP/1.x by its protocol (HTTP/2).
func (e *loopEngine) Handoff(c *h1loop.Conn, nc net.Conn, in []byte) {
	if reason, ok := c.Value.(string); ok {
		e.l.ln.Refuse(nc, reason)
		return
	}
	s := c.Value.(*loopSocket)
	if !c.IsTLS() {
		s.nc.Rebind(h2.Replay(nc, in))
		e.serving.Go(func() { e.l.h1.ServeConn(s.nc) })
		return
	}
	// The session reads and writes through the counted connection, as a
	// TLS connection the listener sorts does.
	s.nc.Rebind(nc)
	tc := c.TLSOver(s.nc)
	state, ok := negotiated(tc)
	switch {
	case !ok:
	case state != nil:
		e.serving.Go(func() { e.l.serveH2(tc, state) })
	default:
		e.serving.Go(func() { e.l.h1.ServeConn(tlsReplay{h2.Replay(tc, in), tc}) })
	}
}

// tlsReplay is a TLS connection handed off by its loop, with the plaintext
// the loop read first: fasthttp takes it for TLS (ConnectionState and
// Handshake).
type tlsReplay struct {
	net.Conn
	tc *tls.Conn
}

func (r tlsReplay) ConnectionState() tls.ConnectionState { return r.tc.ConnectionState() }
func (r tlsReplay) Handshake() error                     { return r.tc.Handshake() }

// NetConn is the connection underneath, for netlimit's look through it.
func (r tlsReplay) NetConn() net.Conn { return r.Conn }

// Request answers in the loop a request that route, check or admission
// refuses (front), and hands any other to a pooled goroutine, which
// serves it on fasthttp as a connection of one request.
func (e *loopEngine) Request(c *h1loop.Conn, h *h1loop.Head) h1loop.Verdict {
	sock := c.Value.(*loopSocket)
	var pre checkedReq
	if v, answered := e.front(c, sock, h, &pre); answered {
		return v
	}
	if forwardsInLoop(h, &pre) {
		return e.forwardInLoop(c, sock, h, &pre)
	}
	r := loopReqs.Get().(*loopReq)
	r.e, r.sock, r.off, r.next, r.pre = e, sock, 0, false, pre
	r.head = append(r.head[:0], h.Raw...)
	r.refs.Store(2) // the worker's ServeConn and fasthttp's Close
	r.closed.Store(false)
	e.workers.submit(r)
	return h1loop.Held
}

// loopReq is one request of a loop connection, as the connection fasthttp
// serves: its head, then an end, at which fasthttp, having answered,
// asks for the next request and ends the connection instead.
type loopReq struct {
	e    *loopEngine
	sock *loopSocket
	head []byte
	off  int
	next bool // fasthttp read past the head: it would keep the connection
	// pre is where the loop left the request (front): rt nil, nowhere.
	pre checkedReq
	// refs counts the two that let go of it: serve and the first Close.
	refs   atomic.Int32
	closed atomic.Bool
}

var loopReqs = sync.Pool{New: func() any { return &loopReq{head: make([]byte, 0, 1024)} }}

func (r *loopReq) Read(p []byte) (int, error) {
	if r.off < len(r.head) {
		n := copy(p, r.head[r.off:])
		r.off += n
		return n, nil
	}
	r.next = true
	return 0, io.EOF
}

func (r *loopReq) Write(p []byte) (int, error) { return r.sock.Write(p) }

// Close is fasthttp's, at the end of the request (perhaps later, on the
// goroutine of a hijack), and perhaps more than once.
func (r *loopReq) Close() error {
	if !r.closed.Swap(true) {
		r.done()
	}
	return nil
}

func (r *loopReq) LocalAddr() net.Addr                { return r.sock.local }
func (r *loopReq) RemoteAddr() net.Addr               { return r.sock.remote }
func (r *loopReq) SetDeadline(t time.Time) error      { return r.sock.SetDeadline(t) }
func (r *loopReq) SetReadDeadline(t time.Time) error  { return nil }
func (r *loopReq) SetWriteDeadline(t time.Time) error { return r.sock.SetWriteDeadline(t) }

// NetConn is the counted connection: netlimit finds it through this.
func (r *loopReq) NetConn() net.Conn { return r.sock.nc }

// serve runs on a worker: fasthttp serves the request, and the loop gets
// the connection back, kept if fasthttp would keep it.
func (r *loopReq) serve() {
	if r.sock.c.IsTLS() {
		r.e.l.h1.ServeConn(tlsLoopReq{r})
	} else {
		r.e.l.h1.ServeConn(r)
	}
	// The admission the loop began ends in enter; should fasthttp not have
	// come so far, what it holds is given back here.
	r.pre.adm.cancel()
	if lc := r.pre.out.loop; lc != nil {
		lc.Abort() // a call fasthttp never came to resume
	}
	mode := h1loop.Keep
	switch {
	case !r.next && r.sock.nc.TakeLinger():
		mode = h1loop.Linger
	case !r.next:
		mode = h1loop.Drop
	}
	r.sock.c.Release(mode)
	r.done()
}

// tlsLoopReq is a loopReq of a TLS connection: fasthttp takes it for TLS
// (ConnectionState and Handshake).
type tlsLoopReq struct{ *loopReq }

func (r tlsLoopReq) ConnectionState() tls.ConnectionState { return r.sock.c.ConnectionState() }
func (r tlsLoopReq) Handshake() error                     { return nil } // done before the loop had it

// loopReqOf is the loop request fasthttp serves as c, if it is one.
func loopReqOf(c net.Conn) *loopReq {
	switch r := c.(type) {
	case *loopReq:
		return r
	case tlsLoopReq:
		return r.loopReq
	}
	return nil
}

func (r *loopReq) done() {
	if r.refs.Add(-1) == 0 {
		r.e, r.sock, r.pre = nil, nil, checkedReq{}
		loopReqs.Put(r)
	}
}

// loopWorkers runs loop requests on goroutines kept between requests, so a
// request neither starts a goroutine nor grows a fresh stack. The most
// recently idle worker goes first (its stack is warm); workers idle for
// workerIdle exit.
type loopWorkers struct {
	mu     sync.Mutex
	idle   []*loopWorker
	closed bool
	// spawned counts the workers started.
	spawned atomic.Uint64
	// onSubmit, if set, is told of each request handed to a worker: a
	// test's probe of which requests the loop serves itself, set before
	// the loop runs (nil but in tests).
	onSubmit func()
}

type loopWorker struct {
	reqs chan *loopReq
	last time.Time
}

// workerIdle is how long an idle worker waits for work before it exits.
const workerIdle = 10 * time.Second

func (p *loopWorkers) submit(r *loopReq) {
	if p.onSubmit != nil {
		p.onSubmit()
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.reqs <- r
		return
	}
	p.mu.Unlock()
	w := &loopWorker{reqs: make(chan *loopReq, 1)}
	w.reqs <- r
	p.spawned.Add(1)
	go p.run(w)
}

func (p *loopWorkers) run(w *loopWorker) {
	timer := time.NewTimer(workerIdle)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-w.reqs:
			if !ok {
				return
			}
			r.serve()
		case <-timer.C:
			if p.retire(w) {
				return
			}
			timer.Reset(workerIdle)
			continue
		}
		w.last = time.Now()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
	}
}

// retire takes w out of the idle workers if it has been idle for
// workerIdle; false if it is busy or was used since.
func (p *loopWorkers) retire(w *loopWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, v := range p.idle {
		if v == w {
			if time.Since(w.last) < workerIdle {
				return false
			}
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return true
		}
	}
	return false
}

// close ends the idle workers; busy ones end when their request does.
func (p *loopWorkers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, w := range p.idle {
		close(w.reqs)
	}
	p.idle = nil
}
