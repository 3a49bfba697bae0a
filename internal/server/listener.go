package server

import (
	"net"
	"sync"
	"sync/atomic"
)

// limitListener closes connections accepted beyond max open ones, at once and
// counted, rather than leaving them in the kernel's backlog where clients
// time out slowly and retry.
// It also keeps the open connections, so a drain that runs out of time can
// close them (closeAll).
func limitListener(ln net.Listener, max int, onReject func()) *limitedListener {
	return &limitedListener{Listener: ln, max: int64(max), onReject: onReject, conns: map[*countedConn]struct{}{}}
}

type limitedListener struct {
	net.Listener
	open     atomic.Int64
	max      int64
	onReject func()

	mu    sync.Mutex
	conns map[*countedConn]struct{}
}

// closeAll closes every open connection accepted by l.
func (l *limitedListener) closeAll() {
	l.mu.Lock()
	conns := make([]*countedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			l.onReject()
			continue
		}
		cc := &countedConn{Conn: c, l: l}
		l.mu.Lock()
		l.conns[cc] = struct{}{}
		l.mu.Unlock()
		return cc, nil
	}
}

type countedConn struct {
	net.Conn
	once sync.Once
	l    *limitedListener
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}
