package sockio

import (
	"syscall"
	"unsafe"
)

const rawSupported = true

// read, write and peek are read(2), write(2) and recvfrom(2) without the
// runtime's syscall state (see the package comment): the sockets are
// non-blocking.
func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}

func write(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}

func peek(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
