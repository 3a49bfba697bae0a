package sqlitestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog/storetest"
	"github.com/leveeproxy/levee/internal/config"
)

// TestStore runs the behaviour every store shares over SQLite: written by
// Create, read by Open (read-only) as levee serve does.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (storetest.Store, storetest.Store) {
			path := filepath.Join(t.TempDir(), "catalog.db")
			w, err := Create(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			return w, openRO(t, path)
		},
		DropChanges: func(t *testing.T, w storetest.Store, upTo int64) {
			if _, err := w.(*Store).db.Exec(`DELETE FROM changes WHERE version <= ?`, upTo); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// newStore makes a catalog file in a temporary directory with storetest.YAMLApps.
func newStore(t *testing.T) (w *Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "catalog.db")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	apps := storetest.Apps(t, "apps.yaml", storetest.YAMLApps)
	if res, err := w.Put(context.Background(), apps, storetest.T0); err != nil || res.Added != 2 {
		t.Fatalf("put: %+v %v", res, err)
	}
	return w, path
}

func openRO(t *testing.T, path string) *Store {
	t.Helper()
	r, err := Open(path, Options{Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestOpenIsReadOnly(t *testing.T) {
	_, path := newStore(t)
	r := openRO(t, path)
	if _, err := r.db.Exec(`DELETE FROM apps`); err == nil {
		t.Fatal("a read-only store deleted rows")
	}
	var mode string
	if err := r.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	// A reading connection maps the file: a cold load reads it in place.
	var mmap int64
	if err := r.db.QueryRow(`PRAGMA mmap_size`).Scan(&mmap); err != nil || mmap != mmapSize {
		t.Errorf("mmap_size = %d, %v; want %d", mmap, err, mmapSize)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.db"), Options{}); err == nil {
		t.Error("opening a missing file must fail, not create it")
	}
}

// A catalog path, or the -wal or -shm file beside it, that is a FIFO, a
// device or a directory is refused before SQLite opens it: a FIFO would
// block the open for good.
func TestOpenRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, good := newStore(t)
	walFIFO := filepath.Join(dir, "wal.db")
	if err := os.Link(good, walFIFO); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(walFIFO+"-wal", 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "not a regular file (a FIFO)"},
		{"/dev/zero", "not a regular file (a device)"},
		{dir, "not a regular file (a directory)"},
		{walFIFO, "wal.db-wal: not a regular file (a FIFO)"},
	} {
		done := make(chan error, 2)
		go func() {
			_, err := Open(c.path, Options{})
			done <- err
			_, err = Create(c.path)
			done <- err
		}()
		for _, op := range []string{"Open", "Create"} {
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, config.ErrNotRegular) {
					t.Errorf("%s(%s) = %v; want %q", op, c.path, err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s(%s) blocked for 10s", op, c.path)
			}
		}
	}
	// Create makes a missing catalog; Open does not.
	created, err := Create(filepath.Join(dir, "new.db"))
	if err != nil {
		t.Fatalf("Create of a missing file: %v", err)
	}
	created.Close()
}
