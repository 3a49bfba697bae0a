// Package instance keeps one active levee per host and config: the active
// instance holds an exclusive flock on a lock file for its whole life. The
// kernel drops the lock when the process ends, however it ends (SIGKILL,
// a crash), so a lock is never left behind by a dead process, and the file
// is never deleted (unlinking a flock file lets two processes lock two
// different files of the same name).
package instance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
)

// Lock is a held instance lock. Release it once, after draining.
type Lock struct {
	f    *os.File
	path string
}

// HeldError says the lock is held by another process.
type HeldError struct {
	Path string
	// PID is the holder's process ID as it wrote it in the file; 0 if
	// unknown (it had not written it yet, or the file is not levee's).
	PID int
}

func (e *HeldError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("instance: %s holds the instance lock %s: another levee is active on this config", holder, e.Path)
}

// TryAcquire takes the lock at path without waiting, creating the file
// (and its directory) if needed, and writes this process's PID in it. If
// another process holds it, it returns a *HeldError naming that process.
// The lock must be a regular file: a FIFO or a device would be "locked" by
// whatever else opens it, and a FIFO opened to read would block. It should
// be on a local filesystem (flock over NFS is emulated or absent, and its
// open has no deadline); the derived default always is.
func TryAcquire(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("instance: lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	writable := err == nil
	if errors.Is(err, os.ErrPermission) {
		// Another user's lock file: flock needs no write permission, so
		// this instance still honours it (it just cannot write its PID).
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("instance: open lock: %w", err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = config.RegularFile(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("instance: lock: %w", err)
	}
	if err := lockNB(f); err != nil {
		pid := readPID(f)
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, &HeldError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("instance: lock %s: %w", path, err)
	}
	// Ours now: say who holds it, for the message a second instance prints.
	l := &Lock{f: f, path: path}
	if writable {
		l.Claim()
	}
	return l, nil
}

// Await polls TryAcquire every `every` until it succeeds or ctx ends
// (returning ctx.Err()). Polling with LOCK_NB, rather than one blocking
// flock, keeps the goroutine cancellable.
func Await(ctx context.Context, path string, clk clock.Clock, every time.Duration) (*Lock, error) {
	for {
		l, err := TryAcquire(path)
		var held *HeldError
		if err == nil || !errors.As(err, &held) {
			return l, err
		}
		t := clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C():
		}
	}
}

func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release gives the lock up. The file stays (see the package comment).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

// RunDir is where derived lock files go when it is writable (systemd's
// RuntimeDirectory=levee makes it).
const RunDir = "/run/levee"

// DefaultPath derives the lock path of the config file at configPath: one
// name per config file (its absolute path with symlinks resolved, hashed),
// in the first of dirs that is a writable directory or already holds that
// lock file (another user's levee made it: its lock must be honoured),
// else os.TempDir(). With no dirs, RunDir is tried.
func DefaultPath(configPath string, dirs ...string) (string, error) {
	abs, err := filepath.Abs(configPath)
	if err != nil {
		return "", fmt.Errorf("instance: config path: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // two paths to one file are one config
	}
	sum := sha256.Sum256([]byte(abs))
	name := "levee-" + sanitize(filepath.Base(abs)) + "-" + hex.EncodeToString(sum[:8]) + ".lock"
	if len(dirs) == 0 {
		dirs = []string{RunDir}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil || writableDir(d) {
			return p, nil
		}
	}
	return filepath.Join(os.TempDir(), name), nil
}

// sanitize keeps a file name readable and safe: letters, digits, '.', '-', '_'.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
