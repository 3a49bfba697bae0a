// Package h2 is levee's HTTP/2 (RFC 9113): the server for client connections,
// and the client connection of the HTTP/2 upstream leg (client.go).
//
// The server serves an http.Handler like net/http's HTTP/2 server, but
// writes differently: a handler's goroutine encodes and writes its own
// frames into the connection's one buffer under a write lock, with no
// handoff to a goroutine of the connection, and the buffer goes to the
// socket when no other writer is waiting for the lock. A response whose
// handler returns with its body buffered leaves as HEADERS and DATA with
// END_STREAM in one write (one TLS record), and the responses of
// concurrent streams coalesce. One goroutine per connection reads frames
// and answers what the protocol asks of it (SETTINGS and PING
// acknowledgements, WINDOW_UPDATE) through the same buffer; one goroutine
// per stream runs the handler once its request headers are complete.
//
// Header blocks are decoded with golang.org/x/net/http2/hpack; responses
// are encoded without the dynamic table (literals without indexing), so a
// stream encodes its block on its own, before it takes the write lock.
package h2

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves HTTP/2 connections whose protocol is already settled
// (ALPN "h2", or an h2c client's preface seen but not consumed).
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading the client's preface and first
	// SETTINGS frame.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request body, from its headers on
	// (http.ResponseController.SetReadDeadline moves it).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from its request's headers
	// on (http.ResponseController.SetWriteDeadline moves it), and each
	// write to the connection. A write, or a wait for a window, past the
	// deadline resets the stream (INTERNAL_ERROR); unlike net/http, no
	// timer resets the stream of a handler that writes nothing meanwhile.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection with no stream for that long.
	IdleTimeout time.Duration
	// MaxHeaderBytes is SETTINGS_MAX_HEADER_LIST_SIZE: a larger request
	// header list is answered 431. Zero: http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS; zero: 250,
	// as net/http.
	MaxConcurrentStreams uint32
	// ErrorLog receives handler panics and the like; nil: package log.
	ErrorLog *log.Logger
	// ConnContext, if set, derives the context of a connection's requests
	// from context.Background.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
	// drained is closed when the last connection ends after a Shutdown.
	drained chan struct{}
	// httpServer is the value of http.ServerContextKey in requests'
	// contexts: a description of this server's settings.
	httpServer *http.Server
}

// stub returns the *http.Server that requests find under
// http.ServerContextKey.
func (s *Server) stub() *http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpServer == nil {
		s.httpServer = &http.Server{Handler: s.Handler, ReadHeaderTimeout: s.ReadHeaderTimeout, ReadTimeout: s.ReadTimeout,
			WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout, MaxHeaderBytes: s.MaxHeaderBytes, ErrorLog: s.ErrorLog}
	}
	return s.httpServer
}

// ErrServerClosed is what ServeConn's connection gets after Shutdown or
// Close: nothing, it is closed.
var ErrServerClosed = http.ErrServerClosed

// ServeConn serves c until it ends, and returns once every handler
// goroutine of its streams has returned. c's preface has not been read.
func (s *Server) ServeConn(c net.Conn) {
	sc := newConn(s, c)
	if !s.track(sc) {
		c.Close()
		return
	}
	defer s.untrack(sc)
	sc.serve()
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// Shutdown refuses new connections, sends each open one a GOAWAY naming
// the last stream it took, lets those streams finish, and closes each
// connection once it has none. It returns when every connection has
// ended, or with ctx's error when ctx ends first (Close then ends them).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	var done chan struct{}
	if len(s.conns) > 0 {
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		done = s.drained
	}
	for c := range s.conns {
		c.startShutdown()
	}
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close refuses new connections and closes every open one at once; their
// handlers see their requests' contexts cancelled.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutdown = true
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams > 0 {
		return s.MaxConcurrentStreams
	}
	return 250
}

func (s *Server) maxHeaderList() uint32 {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	// As net/http: room for the fields' 32-byte overheads (RFC 7541 §4.1).
	return uint32(n) + 10*32
}

var errClientDisconnected = errors.New("h2: client disconnected")
