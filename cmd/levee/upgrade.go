package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/sdnotify"
	"github.com/leveeproxy/levee/internal/server"
	"github.com/leveeproxy/levee/internal/upgrade"
)

// handover is serve's part in upgrades (docs/deploy.md, "Upgrades"): the
// sockets every listener is taken from, what this process inherited when
// an upgrade started it, and the upgrade it starts in its turn.
type handover struct {
	sockets *upgrade.Sockets
	in      *upgrade.Inherited // nil: not started by an upgrade
	// reported is closed once the old levee's reports have ended (it
	// exited, or this process's ctx ended): at once without one.
	reported chan struct{}
}

// newHandover reads what this process inherited, if anything.
func newHandover() (*handover, error) {
	in, err := upgrade.FromEnv()
	if err != nil {
		return nil, err
	}
	h := &handover{sockets: new(upgrade.Sockets), in: in, reported: make(chan struct{})}
	if in != nil {
		h.sockets = in.Sockets()
	} else {
		close(h.reported)
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
func (h *handover) takeOver(ctx context.Context, srv *server.Server, log *slog.Logger) error {
	if h.in == nil {
		return nil
	}
	state, gone, err := h.in.Prepared(ctx)
	if err != nil {
		return err
	}
	if gone {
		log.Warn("upgrade: the old levee went away before handing its state over; starting with fresh limits")
		return nil
	}
	if err := srv.Table().ImportState(state); err != nil {
		log.Warn("upgrade: "+err.Error(), "state_bytes", len(state))
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

// awaitReports waits until the old levee's reports have ended: it exits
// at the end of its own drain, bounded by its drain_timeout.
func (h *handover) awaitReports() { <-h.reported }

// upgrader starts the upgrades of one serving levee, one at a time.
type upgrader struct {
	h      *handover
	srv    *server.Server
	guard  *instanceGuard
	notify *sdnotify.Notifier
	log    *slog.Logger
	// stop ends this process's serving (its drain follows) once the new
	// one serves.
	stop func()
	// done: this levee has handed over.
	done atomic.Bool
	// drained is closed once this levee's Serve has returned; reporting
	// is the goroutine that reports to the new levee until then.
	drained   chan struct{}
	reporting sync.WaitGroup
}

// errHandedOver refuses a second upgrade of a levee that handed over.
var errHandedOver = errors.New("upgrade: this levee has already handed over to a new one")

// run replaces this levee with binary (empty: its own, as on disk now),
// started with this process's arguments. It returns the new process's
// PID once it serves; on any failure this levee serves on as before and
// the error says why. Callers serialise it (with reloads).
func (u *upgrader) run(ctx context.Context, trigger, binary string) (int, error) {
	if u.done.Load() {
		return 0, errHandedOver
	}
	_ = u.notify.Reloading()
	var rep *apps.Reporter
	child, err := upgrade.Start(ctx, upgrade.Spec{
		Binary: binary, Args: os.Args[1:], Env: os.Environ(),
		Stdout: os.Stdout, Stderr: os.Stderr,
		Sockets: u.h.sockets, Lock: u.guard.file(),
	})
	if err == nil {
		// From here until the new one serves, new connections wait in
		// the sockets' backlog: this one accepts none.
		u.h.sockets.Pause()
		// The connections it accepted before the pause get their first
		// request admitted here, under the limits it still holds, rather
		// than 503 draining from the drain (AwaitFirstRequests).
		wait, cancel := context.WithTimeout(ctx, firstRequestGrace)
		if n := u.srv.AwaitFirstRequests(wait); n > 0 {
			u.log.Info("upgrade: handing over with connections that have not sent their first request",
				"connections", n, "waited", firstRequestGrace)
		}
		cancel()
		// What this one still admits (a request on a connection it
		// holds) and has in flight is reported from here on, to be
		// counted against the new one's limits: the state exported
		// after it misses nothing.
		rep = u.srv.Table().Report()
		if err = child.Handover(ctx, u.srv.Table().ExportState()); err != nil {
			rep.Stop()
			u.h.sockets.Resume()
		}
	}
	if err != nil {
		_ = u.notify.Ready(u.guard.status())
		u.log.Error("upgrade failed; this levee keeps serving", "trigger", trigger, "err", err)
		return 0, err
	}
	// The new process is systemd's main process from now on.
	_ = u.notify.MainPID(child.PID(), fmt.Sprintf("serving (upgraded from process %d)", os.Getpid()))
	u.log.Info("upgrade: the new levee serves; draining and exiting", "trigger", trigger, "pid", child.PID())
	u.done.Store(true)
	u.reporting.Go(func() { u.report(child, rep) })
	u.stop()
	return child.PID(), nil
}

// firstRequestGrace bounds how long an upgrade's old levee, no longer
// accepting, waits for the first requests of the connections it has
// accepted (AwaitFirstRequests), while new connections wait in the
// sockets' backlog: long enough for a handshake and a request on a
// loaded machine; a client silent for longer (a preconnect) is not
// worth holding every new connection back.
const firstRequestGrace = 250 * time.Millisecond

// reportEvery is how often a levee that handed over reports its requests
// in flight to the new one, which holds their slots until then: as they
// finish there is no event to wake on.
const reportEvery = 10 * time.Millisecond

// report sends the new levee what this one admits and has in flight,
// until this one's Serve has returned (nothing in flight then), and
// closes the control socket. The first report goes at once: the new levee
// holds every slot for this one until it comes (apps.Table.ImportState),
// and each report seals this one's limits at the ceilings it sends.
func (u *upgrader) report(child *upgrade.Child, rep *apps.Reporter) {
	defer child.Close()
	defer rep.Stop()
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		if err := child.Report(rep.Take()); err != nil {
			u.log.Warn("upgrade: cannot report to the new levee; it counts this one's requests until this one exits", "err", err)
			<-u.drained
			return
		}
		select {
		case <-rep.Wake():
		case <-t.C:
		case <-u.drained:
			_ = child.Report(rep.Take())
			return
		}
	}
}

// handedOver reports whether this levee has handed over to a new one:
// systemd supervises that one now, and takes no message from this one.
func (u *upgrader) handedOver() bool { return u.done.Load() }

// finish ends the reporting, once Serve has returned.
func (u *upgrader) finish() {
	close(u.drained)
	u.reporting.Wait()
}

// reports, in a levee started by an upgrade, counts what the old one
// reports against this one's limits until it exits (or ctx ends), then
// gives back the slots its requests held. Once this levee has handed over
// in its turn, what it counts is passed on in its own reports
// (apps.Table.ApplyReport), so reports keep being read until the old one
// exits: a levee that stopped reading would break the old one's pipe
// and lose its requests from every budget.
func (h *handover) reports(ctx context.Context, srv *server.Server, log *slog.Logger) {
	defer close(h.reported)
	err := h.in.Reports(ctx, func(b []byte) {
		if err := srv.Table().ApplyReport(b); err != nil {
			log.Warn("upgrade: " + err.Error())
		}
	})
	srv.Table().ReleaseHeld()
	if err != nil && ctx.Err() == nil {
		log.Warn("upgrade: the old levee's reports ended early; its requests no longer count here", "err", err)
	}
}
