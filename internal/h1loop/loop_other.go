//go:build !linux

package h1loop

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"time"
)

// Supported reports whether this system has the loop.
const Supported = false

var errUnsupported = errors.New("h1loop: event loops need linux")

// Conn is one client connection of the loop (linux only).
type Conn struct {
	Requests uint64
	Value    any
}

func (c *Conn) Peer() netip.AddrPort                            { return netip.AddrPort{} }
func (c *Conn) Gone() bool                                      { return true }
func (c *Conn) Answer(p []byte)                                 {}
func (c *Conn) Write(p []byte, deadline time.Time) (int, error) { return 0, errUnsupported }
func (c *Conn) Release(m ReleaseMode)                           {}
func (c *Conn) IsTLS() bool                                     { return false }
func (c *Conn) ConnectionState() tls.ConnectionState            { return tls.ConnectionState{} }
func (c *Conn) TLSOver(under net.Conn) *tls.Conn                { return nil }
func (c *Conn) Kill()                                           {}
func (c *Conn) Control(f func(fd uintptr))                      {}

// Server serves HTTP/1.1 connections on event loops (linux only).
type Server struct{}

// New reports that the loop is not supported here.
func New(o Options) (*Server, error) { return nil, errUnsupported }

func (s *Server) Serve(ln *net.TCPListener) error    { return errUnsupported }
func (s *Server) Close() error                       { return nil }
func (s *Server) Open() int64                        { return 0 }
func (s *Server) Shutdown(ctx context.Context) error { return nil }
func (s *Server) PauseAccept()                       {}
func (s *Server) ResumeAccept()                      {}

// ReleaseMode is how Release ends a hold.
type ReleaseMode uint8

const (
	Keep ReleaseMode = iota
	Drop
	Linger
)

// Event is what a Watch's callback is told (linux only).
type Event uint8

const (
	Readable Event = iota
	TimedOut
	Stopped
)

// Watch is a socket a loop's handler waits on (linux only).
type Watch struct{}

// Registration is a socket's place in a loop's set (linux only).
type Registration struct{}

func (r *Registration) In(c *Conn) bool { return false }
func (r *Registration) Drop(fd int)     {}

func (c *Conn) Watch(w *Watch, reg *Registration, fd int, timeout time.Duration, on func(Event)) error {
	return errUnsupported
}
func (w *Watch) SetTimeout(time.Duration)     {}
func (w *Watch) Unwatch()                     {}
func (c *Conn) Reply(p []byte, m ReleaseMode) {}
