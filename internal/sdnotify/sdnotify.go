// Package sdnotify tells systemd (Type=notify) how levee is doing, with the
// sd_notify datagram protocol and no dependency: READY=1 once serving,
// RELOADING=1 and READY=1 around a reload or an upgrade, MAINPID= when an
// upgrade hands over, STOPPING=1 when draining.
package sdnotify

import (
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notifier sends state changes to the socket named by $NOTIFY_SOCKET. A nil
// *Notifier, or one made without the variable set, sends nothing, so
// callers never check whether they run under systemd. Safe for concurrent
// use: each message is one datagram on its own connection.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil when it is unset
// (not run by systemd with Type=notify). An address starting with '@' is in
// the abstract namespace.
func FromEnv() *Notifier {
	return New(os.Getenv("NOTIFY_SOCKET"))
}

// New returns a Notifier for the socket at addr, or nil when addr is empty.
func New(addr string) *Notifier {
	if addr == "" {
		return nil
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: addr, Net: "unixgram"}}
}

// sendTimeout bounds one message: a datagram to a receiver whose queue is
// full blocks, and levee must not hang its reload or its shutdown on a
// systemd that does not read.
const sendTimeout = time.Second

// Send sends one message of newline-separated assignments ("READY=1"),
// giving up after sendTimeout.
func (n *Notifier) Send(state string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return err
	}
	_, err = c.Write([]byte(state))
	return err
}

// Ready says levee serves (its listeners are bound); status is shown by
// systemctl status.
func (n *Notifier) Ready(status string) error {
	return n.Send("READY=1\nSTATUS=" + status)
}

// Reloading says a reload has begun; Ready must follow when it has ended,
// whatever its outcome. systemd wants the CLOCK_MONOTONIC time with it.
func (n *Notifier) Reloading() error {
	return n.Send("RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(monotonicUsec(), 10))
}

// MainPID hands systemd's supervision to process pid, a new levee that an
// upgrade started and that serves now, and says it is ready: from here on
// the unit's main process is pid (NotifyAccess=main then takes its
// messages), and this process's exit does not stop the unit.
func (n *Notifier) MainPID(pid int, status string) error {
	return n.Send("MAINPID=" + strconv.Itoa(pid) + "\nREADY=1\nSTATUS=" + status)
}

// Stopping says levee is draining and will exit.
func (n *Notifier) Stopping() error {
	return n.Send("STOPPING=1\nSTATUS=draining")
}
