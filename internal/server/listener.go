package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/h2"
	"github.com/leveeproxy/levee/internal/h2guard"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
)

// listener is one client-facing socket. Each connection it accepts is
// served by the engine for its protocol: HTTP/1.x by fasthttp (h1), HTTP/2
// by levee's own server (package h2). A TLS listener tells them apart by ALPN after the
// handshake; a plain listener with h2c by the connection preface; a plain
// listener without h2c hands every connection to fasthttp as it is.
type listener struct {
	cfg config.Listener
	ln  *netlimit.Listener // the socket, bounded at server.max_conns
	h1  *fasthttp.Server
	h2  *h2.Server // nil when the listener has neither tls nor h2c
	// h1q is what fasthttp accepts from when a connection must be looked
	// at first (nil for a plain HTTP/1.1 listener: h1 accepts from ln
	// directly, with nothing in between). HTTP/2 connections are served
	// by the goroutine that sorted them (sort).
	h1q *connQueue
	// loop serves the connections instead of fasthttp's accept loop
	// (server.event_loop; nil: off); fasthttp serves its requests.
	loop *loopEngine
	tls  *tls.Config
	// guard bounds the floods of each HTTP/2 connection (h2guard).
	guard *h2guard.Options
	// hello bounds the handshake and the preface, per connection.
	hello time.Duration
	// sorting counts the connections being looked at, so Serve can wait for
	// them: each ends within hello, or, HTTP/2, when h2 has served it.
	sorting sync.WaitGroup
}

// newListener makes the servers of one bound socket.
func (s *Server) newListener(cfg *config.Config, i int, ln net.Listener) (*listener, error) {
	lc := cfg.Listen[i]
	l := &listener{cfg: lc, h1: s.fastServer(cfg), hello: cfg.Server.ReadHeaderTimeout.D()}
	if lc.TLS != nil {
		if cfg.ListenerCertificate(i) == nil {
			return nil, fmt.Errorf("server: listen %s: the certificate was not loaded (config not validated)", lc.Addr)
		}
		// The listener's own certificate is the config in force's, so a
		// reload serves a renewed one (reload cannot change listen).
		l.tls = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if c, err := s.certs.Certificate(hello); c != nil || err != nil {
					return c, err
				}
				return s.current.Load().cfg.ListenerCertificate(i), nil
			}}
		if s.acme != nil { // offered alone by a CA validating TLS-ALPN-01; no browser offers it
			l.tls.NextProtos = append(l.tls.NextProtos, acmeALPN)
		}
	}
	o := netlimit.Options{Max: cfg.Server.MaxConns, PerIP: cfg.Server.MaxConnsPerIP,
		// Trusted proxies carry many clients: they are exempt, as of the
		// config in force.
		Exempt:   func(a netip.Addr) bool { return s.current.Load().trust.Trusted(a) },
		OnReject: func(reason string) { s.metrics.ConnRejected(lc.Addr, reason) }}
	if lc.TLS == nil {
		o.Refusal = reply.Raw // a plain listener can say why
	}
	l.ln = netlimit.NewWith(ln, o)
	if cfg.Server.EventLoop && !lc.H2C {
		var err error
		if l.loop, err = s.newLoopEngine(cfg, l, ln); err != nil {
			return nil, fmt.Errorf("server: listen %s: %w", lc.Addr, err)
		}
		if l.loop == nil {
			s.log.Warn("server.event_loop: the listener is not a TCP socket; fasthttp serves it", "listen", lc.Addr)
		}
	}
	if lc.TLS != nil || lc.H2C {
		l.h2 = s.h2Server(cfg)
		l.h1q = newConnQueue(ln.Addr())
		l.guard = &h2guard.Options{Limits: h2guard.Default(int(cfg.Server.MaxHeaderBytes)), Clock: s.clk,
			OnClose: func(r h2guard.Reason) { s.metrics.H2FloodClosed(string(r)) }}
	}
	return l, nil
}

// h2Server is the server of a listener's HTTP/2 connections.
func (s *Server) h2Server(cfg *config.Config) *h2.Server {
	sc := cfg.Server
	return &h2.Server{
		Handler:           s,
		ReadHeaderTimeout: sc.ReadHeaderTimeout.D(),
		ReadTimeout:       sc.ReadTimeout.D(),
		WriteTimeout:      sc.WriteTimeout.D(),
		IdleTimeout:       sc.IdleTimeout.D(),
		MaxHeaderBytes:    int(sc.MaxHeaderBytes),
		ErrorLog:          s.errlog.StdLogger("http2"),
		// Every connection arrives under the flood guard: TLS ones get
		// Request.TLS from the context (ServeHTTP).
		ConnContext: h2ConnContext,
	}
}

// h2Conn is an HTTP/2 connection as the h2 engine gets it.
type h2Conn struct {
	*h2guard.Conn
	tls *tls.ConnectionState // nil for h2c
}

// h2ConnKey is the context key of a request's *h2Conn.
type h2ConnKey struct{}

// h2ConnContext gives each request its connection: its TLS state, and
// how many of its streams have been reset.
func h2ConnContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*h2Conn); ok {
		return context.WithValue(ctx, h2ConnKey{}, hc)
	}
	return ctx
}

// serve runs the listener's engines until they are shut down; it returns
// the first engine error other than a normal close.
func (l *listener) serve() error {
	if l.loop != nil {
		if err := l.loop.serve(); err != nil {
			return err
		}
		return http.ErrServerClosed
	}
	if l.h2 == nil {
		return serveErr(l.h1.Serve(l.ln))
	}
	errc := make(chan error, 2)
	go func() { errc <- serveErr(l.h1.Serve(l.h1q)) }()
	go func() { errc <- l.sortConns() }()
	var first error
	for range 2 {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) && first == nil {
			first = err
			l.close() // one part failed: stop the others
		}
	}
	l.sorting.Wait()
	return first
}

// serveErr is http.ErrServerClosed for an engine's Serve that ended because
// it was shut down: fasthttp returns nil, and either engine the accept
// error of a socket closed before (or as) the shutdown began.
func serveErr(err error) error {
	if err == nil || errors.Is(err, net.ErrClosed) {
		return http.ErrServerClosed
	}
	return err
}

// sortConns accepts connections and hands each, in a goroutine of its own
// (sorting it is bounded by l.hello), to the engine of its protocol.
func (l *listener) sortConns() error {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.h1q.Close()
			if errors.Is(err, net.ErrClosed) {
				return http.ErrServerClosed
			}
			return err
		}
		l.sorting.Go(func() { l.sort(c) })
	}
}

// sort looks at one new connection: the TLS handshake's ALPN, or a plain
// connection's first bytes. A client that does not finish within l.hello
// is closed. An HTTP/2 connection is served on this goroutine until it
// ends.
func (l *listener) sort(c net.Conn) {
	if l.hello > 0 {
		c.SetDeadline(time.Now().Add(l.hello))
	}
	var isH2 bool
	var state *tls.ConnectionState
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		c = tc
		var ok bool
		if state, ok = negotiated(tc); !ok {
			return
		}
		isH2 = state != nil
	} else {
		pc, sniffed, err := h2.PeekPreface(c)
		if err != nil {
			c.Close()
			return
		}
		c, isH2 = pc, sniffed
	}
	c.SetDeadline(time.Time{}) // the engines set their own
	if isH2 {
		l.serveH2(c, state)
	} else if !l.h1q.push(c) {
		answerDraining(c)
	}
}

// negotiated sorts a TLS connection by the protocol its handshake agreed:
// an ACME validation ends at its handshake, and HTTP/2 must be adequately
// secure (RFC 9113, 9.2), or tc is closed (ok false). state is HTTP/2's
// connection state, nil for HTTP/1.x.
func negotiated(tc *tls.Conn) (state *tls.ConnectionState, ok bool) {
	cs := tc.ConnectionState()
	switch cs.NegotiatedProtocol {
	case acmeALPN:
		tc.Close()
		return nil, false
	case "h2":
		if !h2.Adequate(&cs) {
			h2guard.Refuse(tc, h2guard.ErrCodeInadequateSecurity)
			tc.Close()
			return nil, false
		}
		return new(cs), true // a copy: HTTP/1.1 allocates nothing here
	}
	return nil, true
}

// serveH2 serves an HTTP/2 connection until it ends.
func (l *listener) serveH2(c net.Conn, state *tls.ConnectionState) {
	netlimit.Started(c) // a refused stream's client sends it again
	l.h2.ServeConn(&h2Conn{Conn: h2guard.Wrap(c, l.guard), tls: state})
}

// drainingWrite bounds answerDraining's wait for the request and the
// write of its few bytes.
const drainingWrite = time.Second

// answerDraining answers 503 draining on a connection whose first request
// came once the drain had begun (the engine's queue is closed then), and
// closes it after reading what the client still sends, so that a reset
// does not lose the answer: no client sends a connection's first request
// again when it is closed unanswered (draining.go). It answers once the
// request's first bytes have come (a plain connection's were peeked; a
// TLS one's may not be sent yet when its handshake ends): an answer
// before them reaches a client that takes it for none (Go's: "Unsolicited
// response received on idle HTTP channel", an error it does not retry).
// A client silent for drainingWrite is closed unanswered.
func answerDraining(c net.Conn) {
	netlimit.Linger(c)
	c.SetDeadline(time.Now().Add(drainingWrite))
	var first [1]byte
	if n, _ := c.Read(first[:]); n == 1 {
		c.Write(reply.Raw(reply.Draining))
	}
	c.Close()
}

// close stops accepting: the socket and fasthttp's queue.
func (l *listener) close() {
	if l.loop != nil {
		l.loop.close() // the loops accept from a descriptor of their own
	}
	l.ln.Close()
	if l.h1q != nil {
		l.h1q.Close()
	}
}

// shutdown stops accepting and waits, until ctx ends, for the requests in
// flight on both engines.
func (l *listener) shutdown(ctx context.Context) error {
	if l.loop != nil {
		// The socket closes now, as fasthttp's Shutdown closes it: a client
		// that connects during the drain is refused, not left in a backlog
		// that no loop takes from.
		l.ln.Close()
		if l.h2 == nil {
			return l.loop.shutdown(ctx)
		}
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Go(func() { e1 = l.loop.shutdown(ctx) })
		wg.Go(func() { e2 = l.h2.Shutdown(ctx) })
		wg.Wait()
		return errors.Join(e1, e2)
	}
	if l.h1q != nil {
		l.close() // the socket is the sorter's; fasthttp closes its queue again
	}
	var wg sync.WaitGroup
	var e1, e2 error
	wg.Go(func() {
		// fasthttp closes what it serves first, and gives up at an error
		// there, so a socket it serves must still be open.
		e1 = l.h1.ShutdownWithContext(ctx)
		l.ln.Close() // in case Serve had not started: it returns at once
	})
	if l.h2 != nil {
		wg.Go(func() { e2 = l.h2.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(e1, e2)
}

// closeAll closes every connection still open, on either engine.
func (l *listener) closeAll() {
	if l.h2 != nil {
		l.h2.Close()
	}
	if l.loop != nil {
		l.loop.close()
	}
	l.ln.CloseAll() // fasthttp leaves them running
}

// connQueue is a net.Listener fed by a listener's sorting: fasthttp
// accepts from it the HTTP/1.x connections.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to the engine; false if the queue is closed (c is the caller's then).
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close is idempotent: the listener and its engine both close it.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
