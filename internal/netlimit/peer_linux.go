package netlimit

import (
	"encoding/binary"
	"syscall"
)

// canProbe: peerGone can tell a client that left on this OS.
const canProbe = true

// tcpEstablished is tcpi_state of an open connection (linux/tcp_states.h).
const tcpEstablished = 1

// peerGone reports whether the client has closed or reset the connection
// of raw, without taking a byte from the engine and without touching the
// deadlines it keeps: it peeks at the socket, without blocking.
// Nothing to read: the client is there. A read of 0 bytes (its FIN) or an
// error (a reset): it left. Bytes waiting (a body, a pipelined request, a
// TLS alert) hide what follows them, and the TCP state tells whether the
// client has sent its FIN behind them, as a TLS client does after its
// close_notify. A connection levee closed meanwhile counts as gone.
func peerGone(raw syscall.RawConn) bool {
	gone := false
	err := raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
		case err != nil || n == 0:
			gone = true
		default:
			gone = !established(int(fd))
		}
	})
	return gone || err != nil
}

// established reads the TCP state: the first byte of struct tcp_info,
// which the kernel copies as far as the buffer given (here an int32) goes.
// An error (no TCP_INFO): assume established, as before the probe.
func established(fd int) bool {
	v, err := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_INFO)
	if err != nil {
		return true
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return b[0] == tcpEstablished
}
