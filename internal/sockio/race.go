//go:build race

package sockio

import "syscall"

// Under the race detector, package syscall's reads and writes order what
// a writer did before its bytes before what their reader does after them
// (a release and an acquire of one variable of theirs). sockio's raw calls
// do the same through syscall's own: a write of nothing to no file
// releases, and a read of nothing from the socket acquires. Tests run
// under it see the same order through levee's sockets as through net's.
func wroteIO() { syscall.Write(-1, nil) }

func readIO(fd uintptr) { syscall.Read(int(fd), nil) }
