//go:build !linux

package server

import "syscall"

// canProbe: elsewhere than Linux a fasthttp request's client is not
// watched; one that leaves while queued is noticed when the wait ends.
const canProbe = false

func peerGone(syscall.RawConn) bool { return false }
