// Package h1loop is levee's event-loop HTTP/1.1 front: connections, plain
// or TLS, served from epoll loops rather than a goroutine each. A loop reads a
// readable connection once into one buffer shared by all of them, parses
// the common request head itself (ParseHead: no body, no upgrade, nothing
// a second parser could read differently) and hands the request to its
// Handler, which answers it there (a refusal: one write, no goroutine) or
// holds it (a goroutine forwards it, writes the answer and releases the
// connection). A connection whose next request is not simple is handed
// off, socket and bytes read, to the full engine for the rest of its life.
// Idle connections hold no goroutine and no buffer; timeouts are a timer
// wheel, not a runtime timer per connection.
//
// Why: under overload most requests are refusals, and on a core shared
// with the backend every microsecond a refusal costs is the backend's. A
// goroutine per connection costs a read that ends in EAGAIN, a park and a
// wake-up per request, and cold stacks and buffers at thousands of
// connections (docs/benchmarks.md, "What a refusal costs").
package h1loop

import (
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// Verdict is what Handler.Request did with a request.
type Verdict uint8

const (
	// Answered: the handler wrote the whole answer (Conn.Answer); the loop
	// goes on to the next request.
	Answered Verdict = iota
	// Held: the handler took the request elsewhere (a goroutine that
	// writes the answer with Conn.Write and then calls Conn.Release); the
	// loop reads nothing more from the connection until then.
	Held
	// Close: the handler answered and the connection closes once the
	// answer is written.
	Close
)

// Handler serves the loop's requests.
type Handler interface {
	// Accepted is called in the loop with each new connection; false
	// closes it at once, and Closed is not called for it.
	Accepted(c *Conn) bool
	// Request is called in the loop with each simple head (ParseHead) read
	// on c; h and its views are valid only until it returns.
	Request(c *Conn, h *Head) Verdict
	// Handoff is called in the loop when c's next request is not simple:
	// the handler owns the socket nc (in blocking mode) from then on (the
	// loop has forgotten c) and in is what was read of it and not consumed
	// (its own copy). For a TLS connection (Options.TLS), nc is the socket
	// under the session and in is plaintext: the handler reads and writes
	// through c.TLSOver. It is also called for a connection Accepted
	// refused (before any handshake), and, on the handshake's goroutine,
	// for a TLS connection whose ALPN protocol is not HTTP/1.1, with in
	// nil. It must return promptly: a connection it serves for long is
	// served on a goroutine of its own.
	Handoff(c *Conn, nc net.Conn, in []byte)
	// Closed is called once c's socket is closed: in the loop, or on the
	// handshake's goroutine for a TLS connection whose handshake failed.
	Closed(c *Conn)
}

// Options configure a Server. Zero values take the defaults in
// parentheses.
type Options struct {
	Handler Handler
	// MaxHead is the longest request head read (8 KiB); a longer one is
	// handed off, for the full engine to refuse.
	MaxHead int
	// HeadTimeout bounds reading a head once its first bytes are in (10 s);
	// IdleTimeout the wait for the next request (120 s); WriteTimeout
	// writing what the loop could not write at once (5 min).
	HeadTimeout, IdleTimeout, WriteTimeout time.Duration
	// OnHeadTimeout, if set, is called in the loop when a head's first
	// bytes came but not the rest within HeadTimeout; what it returns is
	// written (as far as the socket takes it at once) before the
	// connection closes lingering.
	OnHeadTimeout func(c *Conn) []byte
	// Tick is the timeouts' granularity (100 ms).
	Tick time.Duration
	// Loops is how many loops share the listener (1).
	Loops int
	// TLS, if set, makes every connection a TLS one: its handshake runs on
	// a goroutine of its own, within HeadTimeout, and the loop then reads
	// and writes through the session (tls_linux.go).
	TLS *tls.Config
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("h1loop: server closed")
