package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
