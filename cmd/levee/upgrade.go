package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/leveeproxy/levee/internal/sdnotify"
	"github.com/leveeproxy/levee/internal/upgrade"
)

// handover is serve's part in upgrades (docs/deploy.md, "Upgrades"): the
// sockets every listener is taken from, what this process inherited when
// an upgrade started it, and the upgrade it starts in its turn.
type handover struct {
	sockets *upgrade.Sockets
	in      *upgrade.Inherited // nil: not started by an upgrade
}

// newHandover reads what this process inherited, if anything.
func newHandover() (*handover, error) {
	in, err := upgrade.FromEnv()
	if err != nil {
		return nil, err
	}
	h := &handover{sockets: new(upgrade.Sockets), in: in}
	if in != nil {
		h.sockets = in.Sockets()
	}
	return h, nil
}

// inheritedLock is the instance lock's file handed over, or nil.
func (h *handover) inheritedLock() *os.File {
	if h.in == nil {
		return nil
	}
	return h.in.Lock()
}

// proxyListen is server.Options.Listen: the proxy's sockets are named by
// their configured address, so a listener that kept its address keeps
// its socket across an upgrade.
func (h *handover) proxyListen(network, address string) (net.Listener, error) {
	return h.sockets.Listen("proxy "+address, network, address)
}

func (h *handover) adminListen(address string) (net.Listener, error) {
	return h.sockets.Listen("admin "+address, "tcp", address)
}

// failed tells the old process, if any, why this one will not serve.
func (h *handover) failed(err error) {
	if h.in != nil && err != nil {
		h.in.Fail(err)
	}
}

// takeOver, in a process started by an upgrade, tells the old one this
// one is prepared and takes the state it sends once it has stopped
// accepting. Elsewhere it does nothing.
func (h *handover) takeOver(ctx context.Context, log *slog.Logger) error {
	if h.in == nil {
		return nil
	}
	_, gone, err := h.in.Prepared(ctx)
	if err != nil {
		return err
	}
	if gone {
		log.Warn("upgrade: the old levee went away before handing its state over; starting with fresh limits")
	}
	return nil
}

// serving, in a process started by an upgrade, tells the old one to
// drain and exit, and names this one in the lock: it accepts from now on.
func (h *handover) serving(guard *instanceGuard, log *slog.Logger) {
	if h.in == nil {
		return
	}
	guard.claim()
	if err := h.in.Serving(); err != nil {
		log.Warn("upgrade: could not tell the old levee this one serves; it ends on its own", "err", err)
	}
}

// upgrader starts the upgrades of one serving levee, one at a time.
type upgrader struct {
	h      *handover
	guard  *instanceGuard
	notify *sdnotify.Notifier
	log    *slog.Logger
	// stop ends this process's serving (its drain follows) once the new
	// one serves.
	stop func()
	// done: this levee has handed over (guarded by the caller's lock).
	done bool
}

// errHandedOver refuses a second upgrade of a levee that handed over.
var errHandedOver = errors.New("upgrade: this levee has already handed over to a new one")

// run replaces this levee with binary (empty: its own, as on disk now),
// started with this process's arguments. It returns the new process's
// PID once it serves; on any failure this levee serves on as before and
// the error says why. Callers serialise it (with reloads).
func (u *upgrader) run(ctx context.Context, trigger, binary string) (int, error) {
	if u.done {
		return 0, errHandedOver
	}
	_ = u.notify.Reloading()
	child, err := upgrade.Start(ctx, upgrade.Spec{
		Binary: binary, Args: os.Args[1:], Env: os.Environ(),
		Stdout: os.Stdout, Stderr: os.Stderr,
		Sockets: u.h.sockets, Lock: u.guard.file(),
	})
	if err == nil {
		// From here until the new one serves, connections wait in the
		// sockets' backlog: this one admits nothing more, so the state
		// it hands over is the whole of it.
		u.h.sockets.Pause()
		if err = child.Handover(ctx, nil); err != nil {
			u.h.sockets.Resume()
		}
	}
	if err != nil {
		_ = u.notify.Ready(u.guard.status())
		u.log.Error("upgrade failed; this levee keeps serving", "trigger", trigger, "err", err)
		return 0, err
	}
	// The new process is systemd's main process from now on.
	_ = u.notify.Send(fmt.Sprintf("MAINPID=%d\nREADY=1\nSTATUS=serving (upgraded from %d)", child.PID(), os.Getpid()))
	u.log.Info("upgrade: the new levee serves; draining and exiting", "trigger", trigger, "pid", child.PID())
	u.done = true
	child.Close()
	u.stop()
	return child.PID(), nil
}
