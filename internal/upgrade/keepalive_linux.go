package upgrade

import (
	"net"
	"syscall"
)

// listenConfig binds levee's listening sockets with TCP keep-alive set on
// the listening socket itself: Linux copies it to every connection the
// socket accepts, so net need not set it again on each (KeepAlive: -1),
// which costs four setsockopt calls per accepted connection (enable, idle,
// interval, count). Under connection churn (clients that time out and
// reconnect, fresh connections at an edge) that was about 15% of levee's
// CPU in a profile of the open-loop overload at 4,000 connections.
//
// The values are net's own defaults (15 s idle, then 15 s between 9
// probes), so that a socket inherited in an upgrade, which net.FileListener
// makes without a ListenConfig and whose accepts therefore set them again,
// gives its connections the same keep-alive.
var listenConfig = net.ListenConfig{KeepAlive: -1, Control: keepAliveListener}

func keepAliveListener(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		for _, o := range [...]struct{ level, opt, v int }{
			{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
		} {
			if err == nil {
				err = syscall.SetsockoptInt(int(fd), o.level, o.opt, o.v)
			}
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// net's defaults for an accepted connection's keep-alive (net.KeepAliveConfig).
const (
	keepAliveIdle     = 15 // seconds
	keepAliveInterval = 15 // seconds
	keepAliveCount    = 9
)
