package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Env is the environment variable that tells a levee it was started by an
// upgrade, and where its inherited descriptors are (layout, JSON).
const Env = "LEVEE_UPGRADE"

// layout is the value of Env: which inherited descriptor is what.
type layout struct {
	Ctrl    int            `json:"ctrl"`
	Lock    int            `json:"lock,omitempty"` // 0: none
	Sockets map[string]int `json:"sockets"`
}

// DefaultTimeout bounds each step of an upgrade when Spec.Timeout is 0:
// the new process's start (its config, catalog and sockets), then its
// taking the state.
const DefaultTimeout = 30 * time.Second

// Spec says which process to start and what to hand it.
type Spec struct {
	// Binary is the new levee; empty: this process's executable as it is
	// on disk now (a package upgrade replaced it).
	Binary string
	// Args are its arguments (without the program name); Env its
	// environment (Env is set in it, replacing any inherited value).
	Args []string
	Env  []string
	// Stdout and Stderr are the new process's, usually this one's.
	Stdout, Stderr *os.File
	// Sockets are handed over, each under its name.
	Sockets *Sockets
	// Lock is the instance lock's open file (nil: no lock).
	Lock *os.File
	// Timeout bounds each step; 0 is DefaultTimeout.
	Timeout time.Duration
}

// Child is a new levee being started by an upgrade, seen from the old one.
type Child struct {
	cmd     *exec.Cmd
	pid     int // kept: Release forgets cmd.Process.Pid
	ctrl    *ctrl
	timeout time.Duration
}

// Start starts the new process and waits until it is prepared: its config
// loaded and checked, the sockets and the lock taken, its server built.
// On any failure (it cannot start, says why not, exits, or is silent past
// the timeout) it is killed and reaped, and the error says why; nothing of
// this process has changed. ctx ends the wait early, the same way.
func Start(ctx context.Context, sp Spec) (*Child, error) {
	if sp.Timeout <= 0 {
		sp.Timeout = DefaultTimeout
	}
	bin := sp.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("upgrade: this levee's binary: %w", err)
		}
		// A replaced binary: Linux reports the old one as "PATH (deleted)".
		bin = strings.TrimSuffix(bin, " (deleted)")
	}
	names, files, err := sp.Sockets.files()
	if err != nil {
		return nil, err
	}
	// The child has its own copies once started: ours are closed then, so
	// that its exit ends the control socket (EOF) at once.
	defer func() { closeAll(files) }()
	fds, err := socketpair()
	if err != nil {
		return nil, fmt.Errorf("upgrade: control socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "levee-upgrade-ctrl")
	files = append(files, theirs)
	ours, err := unixConn(fds[0], "levee-upgrade-ctrl")
	if err != nil {
		return nil, err
	}
	lay := layout{Ctrl: 3, Sockets: map[string]int{}}
	extra := []*os.File{theirs}
	if sp.Lock != nil {
		lay.Lock = 3 + len(extra)
		extra = append(extra, sp.Lock)
	}
	for i, name := range names {
		lay.Sockets[name] = 3 + len(extra)
		extra = append(extra, files[i])
	}
	env, _ := json.Marshal(lay)
	cmd := exec.Command(bin, sp.Args...)
	cmd.Env = append(withoutEnv(sp.Env), Env+"="+string(env))
	cmd.Stdout, cmd.Stderr = sp.Stdout, sp.Stderr
	cmd.ExtraFiles = extra
	err = cmd.Start()
	closeAll(files)
	files = nil
	sp.Sockets.nonblocking() // cmd.Start took the copies' Fd(): blocking mode
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("upgrade: start %s: %w", bin, err)
	}
	c := &Child{cmd: cmd, pid: cmd.Process.Pid, ctrl: &ctrl{c: ours}, timeout: sp.Timeout}
	m, err := c.await(ctx, kindPrepared)
	if err != nil {
		return nil, c.abort(err)
	}
	if m.PID != cmd.Process.Pid {
		return nil, c.abort(fmt.Errorf("upgrade: prepared by process %d, not the one started (%d)", m.PID, cmd.Process.Pid))
	}
	return c, nil
}

func unixConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileConn made its own copy
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("upgrade: control socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("upgrade: control socket: not a unix socket")
	}
	return uc, nil
}

func withoutEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, Env+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// PID is the new process's ID.
func (c *Child) PID() int { return c.pid }

// Handover sends the limits' state (taken after this process stopped
// accepting and admitting) and waits until the new process serves. On
// failure the new process is killed and reaped, and the caller resumes
// serving. On success the new process is left to run on its own; the
// control socket stays open for Report until Close.
func (c *Child) Handover(ctx context.Context, state []byte) error {
	if err := c.ctrl.send(message{Kind: kindState, State: state}, time.Now().Add(c.timeout)); err != nil {
		return c.abort(err)
	}
	if _, err := c.await(ctx, kindServing); err != nil {
		return c.abort(err)
	}
	// Not waited for: it outlives this process (its parent becomes init,
	// or systemd's main PID is moved to it).
	_ = c.cmd.Process.Release()
	return nil
}

// Report tells the new process what this one admitted, and still holds,
// since the state: it counts them against its own limits.
func (c *Child) Report(report []byte) error {
	return c.ctrl.send(message{Kind: kindReport, Report: report}, time.Now().Add(c.timeout))
}

// Close closes the control socket: the new process then knows this one
// holds nothing more.
func (c *Child) Close() error { return c.ctrl.close() }

// await reads the next frame, which must be of kind want. A "failed"
// frame, the socket's end, ctx's end or the timeout is an error.
func (c *Child) await(ctx context.Context, want string) (message, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.ctrl.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	m, err := c.ctrl.recv(time.Now().Add(c.timeout))
	switch {
	case ctx.Err() != nil:
		return m, fmt.Errorf("upgrade: cancelled: %w", ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return m, fmt.Errorf("upgrade: the new levee did not get %s within %v", want, c.timeout)
	case err != nil:
		return m, err
	case m.Kind == kindFailed:
		return m, &FailedError{PID: c.PID(), Reason: m.Err}
	case m.Kind != want:
		return m, fmt.Errorf("upgrade: the new levee said %q, want %q", m.Kind, want)
	}
	return m, nil
}

// FailedError is the new process's own account of why it could not start.
type FailedError struct {
	PID    int
	Reason string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("upgrade: the new levee (process %d) could not start: %s", e.PID, e.Reason)
}

// abort kills the new process (if it still runs), reaps it and closes the
// control socket, and returns err with how the process ended.
func (c *Child) abort(err error) error {
	_ = c.cmd.Process.Kill()
	werr := c.cmd.Wait() // prompt after SIGKILL
	c.ctrl.close()
	var exit *exec.ExitError
	if errors.Is(err, errPeerGone) && errors.As(werr, &exit) {
		return fmt.Errorf("upgrade: the new levee (process %d) exited before serving (%v); see its log above", c.PID(), exit.ProcessState)
	}
	return err
}
