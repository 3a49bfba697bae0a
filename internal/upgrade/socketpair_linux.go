package upgrade

import "syscall"

// socketpair makes a connected pair of unix stream sockets, closed on exec
// from their making: no child started meanwhile inherits them.
func socketpair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
