package sdnotify

import (
	"syscall"
	"unsafe"
)

// monotonicUsec reads CLOCK_MONOTONIC in microseconds, the clock systemd
// compares MONOTONIC_USEC with (Go's monotonic clock is not exposed).
func monotonicUsec() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano() / 1000
}
