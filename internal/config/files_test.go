package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// hostileFiles makes the paths a config must refuse, by name: each is not
// a regular file, or is one over a cap of max bytes.
func hostileFiles(t *testing.T, max int64) map[string]string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, max+1); err != nil { // sparse: no need to write it
		t.Fatal(err)
	}
	return map[string]string{
		"fifo":      fifo,
		"dev/zero":  "/dev/zero",
		"directory": dir,
		"over cap":  big,
	}
}

// wantRefusal is the message each of hostileFiles gives.
var wantRefusal = map[string]string{
	"fifo":      "not a regular file (a FIFO)",
	"dev/zero":  "not a regular file (a device)",
	"directory": "not a regular file (a directory)",
	"over cap":  "larger than ",
}

// noHang runs f and fails the test if it has not returned within a
// generous deadline: opening a FIFO without O_NONBLOCK blocks forever. f
// must not call t.Fatal (it runs on another goroutine).
func noHang[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked for 10s", what)
		panic("unreachable")
	}
}

func TestReadFileBounded(t *testing.T) {
	const max = 1 << 10
	for name, path := range hostileFiles(t, max) {
		t.Run(name, func(t *testing.T) {
			err := noHang(t, "ReadFileBounded("+path+")", func() error {
				_, err := ReadFileBounded(path, max)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), wantRefusal[name]) || !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadFileBounded(%s) = %v, want an error naming the path and %q", path, err, wantRefusal[name])
			}
			var tooLarge *TooLargeError
			if errors.Is(err, ErrNotRegular) == errors.As(err, &tooLarge) {
				t.Errorf("error %v: want exactly one of ErrNotRegular and *TooLargeError", err)
			}
		})
	}
	t.Run("at the cap", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, make([]byte, max), 0o600); err != nil {
			t.Fatal(err)
		}
		if data, err := ReadFileBounded(path, max); err != nil || len(data) != max {
			t.Fatalf("ReadFileBounded of %d bytes, cap %d = %d bytes, %v; want all of it", max, max, len(data), err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := ReadFileBounded(filepath.Join(t.TempDir(), "absent"), max)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ReadFileBounded of a missing file = %v, want os.ErrNotExist", err)
		}
	})
}

// TestLoadRefusesHostileConfigFile: the config file itself is bounded.
func TestLoadRefusesHostileConfigFile(t *testing.T) {
	for name, path := range hostileFiles(t, MaxConfigBytes) {
		t.Run(name, func(t *testing.T) {
			err := noHang(t, "Load("+path+")", func() error {
				_, err := Load(path)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), wantRefusal[name]) {
				t.Fatalf("Load(%s) = %v, want %q", path, err, wantRefusal[name])
			}
		})
	}
}

// TestTLSFilesBounded: validation refuses a cert or key that is not a
// regular file or is over MaxPEMBytes, at the field that names it.
func TestTLSFilesBounded(t *testing.T) {
	cert, key := writeCert(t)
	for name, bad := range hostileFiles(t, MaxPEMBytes) {
		for _, field := range []string{"cert", "key"} {
			t.Run(name+"/"+field, func(t *testing.T) {
				c, k := cert, key
				if field == "cert" {
					c = bad
				} else {
					k = bad
				}
				src := "listen: [{addr: 127.0.0.1:443, tls: {cert: '" + c + "', key: '" + k + "'}}]"
				err := noHang(t, "Parse", func() error { _, err := Parse([]byte(src)); return err })
				var es Errors
				errors.As(err, &es)
				want := wantRefusal[name]
				if name == "over cap" {
					want = "larger than 1 MiB"
				}
				if len(es) != 1 || es[0].Path != "listen[0].tls."+field || !strings.Contains(es[0].Msg, want) {
					t.Fatalf("errors %v, want one at listen[0].tls.%s containing %q", es, field, want)
				}
			})
		}
	}
}

// stallingOpen opens files only once released: a stalled filesystem, as
// far as Files can tell. Each open is announced on opened.
type stallingOpen struct {
	opened  chan string
	release chan struct{}
	count   atomic.Int32
}

func newStallingOpen() *stallingOpen {
	return &stallingOpen{opened: make(chan string, 16), release: make(chan struct{})}
}

func (s *stallingOpen) open(path string) (file, error) {
	s.count.Add(1)
	s.opened <- path
	<-s.release
	return openNonblock(path)
}

// stalledFiles is a Files on a fake clock whose opens stall until
// released, and a file at path holding content.
func stalledFiles(t *testing.T, content string, timeout time.Duration) (path string, clk *clock.Fake, stall *stallingOpen, f *Files) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	clk, stall = clock.NewFake(time.Unix(0, 0)), newStallingOpen()
	return path, clk, stall, &Files{Timeout: timeout, Clock: clk, open: stall.open}
}

// readAsync runs f.Read on a goroutine; the result comes on the channel.
func readAsync(ctx context.Context, f *Files, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.Read(ctx, path, 1<<10)
		done <- err
	}()
	return done
}

func TestFilesReadDeadline(t *testing.T) {
	path, clk, stall, f := stalledFiles(t, "hello", time.Second)

	first := readAsync(context.Background(), f, path)
	<-stall.opened
	<-clk.TimerCreated()
	clk.Advance(time.Second - time.Nanosecond)
	select {
	case err := <-first:
		t.Fatalf("Read returned %v before its deadline", err)
	default:
	}
	clk.Advance(time.Nanosecond)
	err := noHang(t, "Read past its deadline", func() error { return <-first })
	var te *TimeoutError
	if !errors.As(err, &te) || te.After != time.Second || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "not read within 1s") {
		t.Fatalf("stalled Read = %v; want a *TimeoutError after 1s naming %s", err, path)
	}

	// The stalled read goes on; a second Read of the path waits for it
	// instead of opening the file again, and gives up at its own deadline.
	second := readAsync(context.Background(), f, path)
	<-clk.TimerCreated()
	clk.Advance(time.Second)
	if err := noHang(t, "second Read", func() error { return <-second }); !errors.As(err, &te) {
		t.Fatalf("second Read = %v; want a *TimeoutError", err)
	}
	// A context that ends first ends the wait first.
	ctx, cancel := context.WithCancel(context.Background())
	third := readAsync(ctx, f, path)
	<-clk.TimerCreated()
	cancel()
	if err := noHang(t, "cancelled Read", func() error { return <-third }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Read = %v; want context.Canceled", err)
	}
	if n := stall.count.Load(); n != 1 {
		t.Fatalf("%d opens of a stalled file; want 1 (the later Reads wait for it)", n)
	}

	// Once the filesystem answers, the read ends and a new Read opens again.
	close(stall.release)
	noHang(t, "the stalled read to end", func() bool {
		for {
			f.mu.Lock()
			n := len(f.reading)
			f.mu.Unlock()
			if n == 0 {
				return true
			}
			time.Sleep(time.Millisecond)
		}
	})
	data, err := noHang(t, "Read after the stall", func() readResult {
		d, err := f.Read(context.Background(), path, 1<<10)
		return readResult{d, err}
	}).get()
	if err != nil || string(data) != "hello" || stall.count.Load() != 2 {
		t.Fatalf("Read after the stall = %q %v, %d opens; want hello, 2 opens", data, err, stall.count.Load())
	}
}

type readResult struct {
	data []byte
	err  error
}

func (r readResult) get() ([]byte, error) { return r.data, r.err }

// Reads of one path at once share one read, each with its own bytes.
func TestFilesReadsShareOneRead(t *testing.T) {
	path, clk, stall, f := stalledFiles(t, "shared", 0) // the default timeout: far beyond the test
	results := make(chan readResult, 2)
	for range 2 {
		go func() { d, err := f.Read(context.Background(), path, 1<<10); results <- readResult{d, err} }()
		<-clk.TimerCreated() // Read times its wait once it has started or joined the read
	}
	close(stall.release)
	a, b := noHang(t, "read a", func() readResult { return <-results }), noHang(t, "read b", func() readResult { return <-results })
	if a.err != nil || b.err != nil || string(a.data) != "shared" || string(b.data) != "shared" || &a.data[0] == &b.data[0] {
		t.Fatalf("two reads: %q %v, %q %v; want both, each its own bytes", a.data, a.err, b.data, b.err)
	}
	if n := stall.count.Load(); n != 1 {
		t.Fatalf("%d opens for two Reads at once; want 1", n)
	}
}
