package admin

import (
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The admin listener's own bounds. It serves operators and scrapers, a few
// connections at a time, so these are fixed rather than configured: they
// only keep idle or slow admin clients from holding descriptors that the
// proxy needs.
const (
	// MaxConns is the most admin connections open at once; more are closed
	// as soon as they are accepted.
	MaxConns = 64
	// ReadHeaderTimeout bounds reading a request's headers, and how long a
	// new connection may sit before its first request.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds reading a whole request; admin requests have no
	// body worth waiting for.
	ReadTimeout = 30 * time.Second
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout = 30 * time.Second
)

// NewServer returns the admin http.Server for h, with the timeouts above.
// It has no WriteTimeout: /debug/pprof/profile?seconds=N writes only after
// N seconds. errorLog may be nil (the log package's default).
func NewServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          errorLog,
	}
}

// LimitListener returns ln accepting at most max open connections: one
// accepted beyond that is closed at once, so the client sees it refused
// instead of waiting in the kernel's backlog. Closing a returned conn frees
// its place. It is safe for concurrent use.
func LimitListener(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, max: int64(max)}
}

type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

type limitConn struct {
	net.Conn
	once sync.Once
	l    *limitListener
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
