package drill

import (
	"encoding/binary"
	"fmt"
	"net"
	"syscall"
)

// EnsureFiles raises the process's soft open-files limit (RLIMIT_NOFILE)
// to n if it is lower and the hard limit allows it; it fails, naming both
// limits, if the hard limit is below n. Go already raises the soft limit to
// the hard one at start-up, so this mostly checks.
func EnsureFiles(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("drill: open-files limit: %w", err)
	}
	need := uint64(n)
	if lim.Cur >= need {
		return nil
	}
	if lim.Max < need {
		return fmt.Errorf("drill: %d open files are needed, and RLIMIT_NOFILE allows %d (hard limit %d): "+
			"raise it (ulimit -n %d) or ask for fewer connections", n, lim.Cur, lim.Max, n)
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("drill: raise the open-files limit to %d: %w", n, err)
	}
	return nil
}

// rcvbufControl sets SO_RCVBUF before the connection is made, so the
// window the attacker advertises is small from the handshake on.
func rcvbufControl(size int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// tcpEstablished is tcpi_state of an open connection (linux/tcp_states.h).
const tcpEstablished = 1

// peerClosed reports whether the edge has closed or reset c: its TCP state
// (the first byte of struct tcp_info) is no longer ESTABLISHED. It sees a
// FIN as soon as it has arrived, even behind unread bytes.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = raw.Control(func(fd uintptr) {
		v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_INFO)
		if err != nil {
			return
		}
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], uint32(v))
		closed = b[0] != tcpEstablished
	})
	return closed
}
