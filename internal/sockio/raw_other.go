//go:build !linux

package sockio

import "syscall"

// Elsewhere than Linux (which levee's upgrade needs anyway), Conn passes
// every read and write to the connection (Init reports false), and Peek
// sees nothing.
const rawSupported = false

func read(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func write(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
func peek(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
