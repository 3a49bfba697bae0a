package server

import (
	"net"
	"sync"
	"sync/atomic"
)

// limitListener closes connections accepted beyond max open ones, at once and
// counted, rather than leaving them in the kernel's backlog where clients
// time out slowly and retry.
func limitListener(ln net.Listener, max int, onReject func()) net.Listener {
	return &limitedListener{Listener: ln, max: int64(max), onReject: onReject}
}

type limitedListener struct {
	net.Listener
	open     atomic.Int64
	max      int64
	onReject func()
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
		return &countedConn{Conn: c, l: l}, nil
	}
}

type countedConn struct {
	net.Conn
	once sync.Once
	l    *limitedListener
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
