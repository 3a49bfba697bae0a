package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// Inherited is what a process started by an upgrade got from the one it
// replaces. Its methods are called in order: Sockets and Lock while
// starting, then Prepared, then Serving, or Fail at any point.
type Inherited struct {
	ctrl    *ctrl
	lock    *os.File
	sockets *Sockets
	timeout time.Duration
}

// FromEnv returns what this process inherited, or nil when it was not
// started by an upgrade (Env unset).
func FromEnv() (*Inherited, error) {
	v, ok := os.LookupEnv(Env)
	if !ok {
		return nil, nil
	}
	var lay layout
	if err := json.Unmarshal([]byte(v), &lay); err != nil {
		return nil, fmt.Errorf("upgrade: %s: %w", Env, err)
	}
	in := &Inherited{sockets: &Sockets{inherited: map[string]*net.TCPListener{}}, timeout: DefaultTimeout}
	syscall.CloseOnExec(lay.Ctrl) // a later upgrade passes its own copies
	c, err := unixConn(lay.Ctrl, "levee-upgrade-ctrl")
	if err != nil {
		return nil, err
	}
	in.ctrl = &ctrl{c: c}
	if lay.Lock > 0 {
		syscall.CloseOnExec(lay.Lock)
		in.lock = os.NewFile(uintptr(lay.Lock), "levee-instance-lock")
	}
	for name, fd := range lay.Sockets {
		syscall.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), name)
		ln, err := net.FileListener(f)
		f.Close()
		tl, ok := ln.(*net.TCPListener)
		if err != nil || !ok {
			in.Fail(fmt.Errorf("upgrade: inherited socket %s: not a TCP listener (%v)", name, err))
			return nil, fmt.Errorf("upgrade: inherited socket %s: not a TCP listener (%v)", name, err)
		}
		in.sockets.inherited[name] = tl
	}
	return in, nil
}

// Sockets are the inherited sockets, to be taken by name before binding
// new ones.
func (in *Inherited) Sockets() *Sockets { return in.sockets }

// Lock is the inherited instance lock's file (nil: the old process held
// none), for instance.Adopt.
func (in *Inherited) Lock() *os.File { return in.lock }

// Prepared tells the old process this one is ready to serve, and waits
// for the limits' state it sends once it has stopped accepting. With
// gone true and no error, the old process went away first: it holds
// nothing more, and this one starts with fresh state.
func (in *Inherited) Prepared(ctx context.Context) (state []byte, gone bool, err error) {
	in.sockets.CloseUnclaimed()
	if err := in.ctrl.send(message{Kind: kindPrepared, PID: os.Getpid()}, time.Now().Add(in.timeout)); err != nil {
		return nil, false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = in.ctrl.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	m, err := in.ctrl.recv(time.Now().Add(in.timeout))
	switch {
	case err == errPeerGone:
		return nil, true, nil
	case err != nil:
		return nil, false, err
	case m.Kind != kindState:
		return nil, false, fmt.Errorf("upgrade: the old levee said %q, want %q", m.Kind, kindState)
	}
	return m.State, false, nil
}

// Serving tells the old process this one accepts now: it drains and exits.
func (in *Inherited) Serving() error {
	return in.ctrl.send(message{Kind: kindServing, PID: os.Getpid()}, time.Now().Add(in.timeout))
}

// Fail tells the old process why this one cannot serve, and closes the
// control socket; the old one keeps serving.
func (in *Inherited) Fail(err error) {
	_ = in.ctrl.send(message{Kind: kindFailed, Err: err.Error()}, time.Now().Add(time.Second))
	in.ctrl.close()
}

// Close closes the control socket and any socket not taken.
func (in *Inherited) Close() error {
	in.sockets.CloseUnclaimed()
	return in.ctrl.close()
}

// Reports calls apply with each report the old process sends after
// Serving, until it closes the control socket (it has exited: it holds
// nothing more), which returns nil, or ctx ends. The control socket is
// closed on return.
func (in *Inherited) Reports(ctx context.Context, apply func([]byte)) error {
	defer in.ctrl.close()
	stop := context.AfterFunc(ctx, func() { _ = in.ctrl.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		m, err := in.ctrl.recv(time.Time{}) // no deadline: the old levee drains for as long as it drains
		switch {
		case err == errPeerGone:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		case m.Kind != kindReport:
			return fmt.Errorf("upgrade: the old levee said %q, want %q", m.Kind, kindReport)
		}
		apply(m.Report)
	}
}
