//go:build !linux

package netlimit

import "syscall"

// canProbe: elsewhere than Linux a waiting request's client is not
// watched; one that leaves while queued is noticed when the wait ends.
const canProbe = false

func peerGone(syscall.RawConn) bool { return false }
