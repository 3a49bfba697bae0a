package admin

import (
	"log"
	"net"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/netlimit"
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
// its place. It is the proxy listeners' bound (netlimit), uncounted.
func LimitListener(ln net.Listener, max int) net.Listener { return netlimit.New(ln, max, nil) }
