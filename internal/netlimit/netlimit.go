// Package netlimit bounds the connections a listener keeps open: the
// proxy's listeners (server.max_conns) and the admin listener alike.
package netlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener closes connections accepted beyond max open ones, at once, rather
// than leaving them in the kernel's backlog where clients time out slowly
// and retry. It keeps the open connections, so a drain that runs out of time
// can close them (CloseAll). Safe for concurrent use.
type Listener struct {
	net.Listener
	open     atomic.Int64
	max      int64
	onReject func() // nil: not counted

	mu    sync.Mutex
	conns map[*Conn]struct{}
}

// New returns ln bounded at max open connections; onReject (nil: nothing)
// is called for each connection closed at accept.
func New(ln net.Listener, max int, onReject func()) *Listener {
	return &Listener{Listener: ln, max: int64(max), onReject: onReject, conns: map[*Conn]struct{}{}}
}

// Accept returns the next connection within the bound, as a *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			if l.onReject != nil {
				l.onReject()
			}
			continue
		}
		cc := Wrap(c)
		cc.l = l
		l.mu.Lock()
		l.conns[cc] = struct{}{}
		l.mu.Unlock()
		return cc, nil
	}
}

// CloseAll closes every open connection accepted by l.
func (l *Listener) CloseAll() {
	l.mu.Lock()
	conns := make([]*Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Conn is a connection a Listener counts; closing it frees its place.
type Conn struct {
	net.Conn
	once sync.Once
	l    *Listener // nil for a Conn made by Wrap alone
	ip   string    // the peer's address, formatted once per connection
}

// Wrap makes c a Conn counted by no listener (Accept's, and tests').
func Wrap(c net.Conn) *Conn { return &Conn{Conn: c, ip: peerString(c.RemoteAddr())} }

// PeerIP is the peer's address without its port: a client key of "ip"
// reads it per request without formatting (or allocating) it again.
func (c *Conn) PeerIP() string { return c.ip }

// Close closes the connection and, once, gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if l := c.l; l != nil {
			l.open.Add(-1)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}
	})
	return err
}

// peerString formats a TCP peer's address ("" for another kind).
func peerString(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().String()
	}
	return ""
}
