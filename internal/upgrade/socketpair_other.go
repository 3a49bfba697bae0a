//go:build !linux

package upgrade

import "syscall"

// socketpair makes a connected pair of unix stream sockets, closed on
// exec. Without SOCK_CLOEXEC, the fork lock keeps a child from being
// started between their making and the flag, as package net does.
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
