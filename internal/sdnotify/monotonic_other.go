//go:build !linux

package sdnotify

// monotonicUsec is 0 off Linux, where there is no systemd to read it.
func monotonicUsec() int64 { return 0 }
