//go:build !linux

package drill

import (
	"net"
	"syscall"
)

// EnsureFiles checks nothing off Linux: a dial beyond the limit fails and
// counts as refused.
func EnsureFiles(n int) error { return nil }

// rcvbufControl is nil off Linux: SetReadBuffer after the dial sets the buffer.
func rcvbufControl(int) func(network, address string, c syscall.RawConn) error { return nil }

// peerClosed cannot tell off Linux; a read sees the close instead.
func peerClosed(net.Conn) bool { return false }
