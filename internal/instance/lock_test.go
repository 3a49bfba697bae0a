package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

func TestLockIsExclusiveAndNamesItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "levee.lock")
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.TrimSpace(string(data)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want our PID %d", data, os.Getpid())
	}
	// flock locks belong to the open file: a second open, even in this
	// process, is a second instance.
	_, err = TryAcquire(path)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("second TryAcquire = %v, want a HeldError naming PID %d", err, os.Getpid())
	}
	if !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Errorf("message %q does not name the holder", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil { // twice is harmless
		t.Fatal(err)
	}
	l2, err := TryAcquire(path)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Release removed the lock file: %v", err)
	}
}

func TestHeldErrorWithoutPID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "levee.lock")
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	os.WriteFile(path, []byte("garbage"), 0o644)
	_, err = TryAcquire(path)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != 0 || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("got %v, want a HeldError with an unknown PID", err)
	}
}

func TestAwaitTakesTheLockWhenItFrees(t *testing.T) {
	path := filepath.Join(t.TempDir(), "levee.lock")
	holder, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := Await(context.Background(), path, clk, time.Second)
		got <- result{l, err}
	}()
	<-clk.TimerCreated() // tried once, found it held, waiting
	select {
	case r := <-got:
		t.Fatalf("Await returned %v, %v while the lock was held", r.l, r.err)
	default:
	}
	holder.Release()
	clk.Advance(time.Second)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not take the freed lock")
	}
}

func TestAwaitEndsWithItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "levee.lock")
	holder, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Await(ctx, path, clk, time.Second)
		done <- err
	}()
	<-clk.TimerCreated()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Await = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Await ignored its context")
	}
}

func TestDefaultPath(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "levee.yaml")
	os.WriteFile(cfg, nil, 0o644)
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(cfg, link); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	os.Mkdir(run, 0o755)

	p1, err := DefaultPath(cfg, run)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p1) != run || !strings.HasPrefix(filepath.Base(p1), "levee-levee.yaml-") || !strings.HasSuffix(p1, ".lock") {
		t.Errorf("DefaultPath = %s, want levee-levee.yaml-HASH.lock in %s", p1, run)
	}
	// A relative path and a symlink to the same file are the same config.
	wd, _ := os.Getwd()
	t.Chdir(dir)
	p2, _ := DefaultPath("levee.yaml", run)
	p3, _ := DefaultPath(link, run)
	t.Chdir(wd)
	if p2 != p1 || p3 != p1 {
		t.Errorf("same config, different locks: %s %s %s", p1, p2, p3)
	}
	other := filepath.Join(dir, "other.yaml")
	if p4, _ := DefaultPath(other, run); p4 == p1 {
		t.Errorf("two configs share the lock %s", p4)
	}
	// No writable directory: the temporary directory.
	if p5, _ := DefaultPath(cfg, filepath.Join(dir, "missing")); filepath.Dir(p5) != filepath.Clean(os.TempDir()) {
		t.Errorf("fallback = %s, want it in %s", p5, os.TempDir())
	}
}

// A lock path that is a FIFO, a device or a directory is refused, at once:
// another program opening it would share the "lock", and a FIFO opened
// without O_NONBLOCK would block.
func TestLockRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "not a regular file (a FIFO)",
		"/dev/null": "not a regular file (a device)",
		dir:         "is a directory",
	} {
		done := make(chan error, 1)
		go func() {
			l, err := TryAcquire(path)
			l.Release()
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("TryAcquire(%s) = %v; want %q", path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("TryAcquire(%s) blocked for 10s", path)
		}
	}
}

// A lock handed over as an open descriptor stays one lock: the new holder
// adopts it (and names itself in the file), no third open can take it
// while either holds it, and it frees only when both have let go.
func TestAdoptKeepsOneLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "levee.lock")
	old, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := dupFile(old.File())
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := Adopt(path, dup)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	adopted.Claim()
	if got := HolderPID(path); got != os.Getpid() {
		t.Errorf("HolderPID after Claim = %d, want %d", got, os.Getpid())
	}
	var held *HeldError
	if _, err := TryAcquire(path); !errors.As(err, &held) {
		t.Fatalf("third open while both hold it: %v, want HeldError", err)
	}
	old.Release()
	if _, err := TryAcquire(path); !errors.As(err, &held) {
		t.Fatalf("third open after the old one let go: %v, want HeldError", err)
	}
	adopted.Release()
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatalf("after both let go: %v", err)
	}
	l.Release()
}

// Adopt refuses a descriptor of another file, and one whose lock another
// open file description holds.
func TestAdoptRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "levee.lock")
	holder, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	other, err := os.Create(filepath.Join(dir, "other.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := Adopt(path, other); err == nil || !strings.Contains(err.Error(), "not "+path) {
		t.Errorf("Adopt(another file) = %v, want it refused", err)
	}
	second, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	var held *HeldError
	if _, err := Adopt(path, second); !errors.As(err, &held) {
		t.Errorf("Adopt(a new open of a held lock) = %v, want HeldError", err)
	}
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
