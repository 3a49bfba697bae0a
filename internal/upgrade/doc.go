// Package upgrade replaces a running levee with a new process (a new
// binary, or the same one) without refusing a connection and without two
// processes ever enforcing the limits at once.
//
// The old process starts the new one with its listening sockets, its
// instance lock and one end of a control socket as inherited descriptors
// (ExtraFiles; the layout is in the environment variable Env). The two
// then talk over the control socket, in frames (wire.go):
//
//	new → old  prepared    config loaded and checked, sockets taken, server built
//	old        pauses accepting (connections wait in the kernel's backlog of
//	           the socket both processes hold, never refused)
//	old → new  state       the limits' state, taken after the pause
//	new → old  serving     accepting now; the old one drains and exits
//	new → old  failed      why not; the old one resumes accepting
//
// A new process that exits, crashes or says nothing in time before
// "serving" leaves the old one serving as it was. The lock is the same
// open file description in both (package instance), so it is held by
// one lock throughout, and freed by neither's exit alone.
package upgrade
