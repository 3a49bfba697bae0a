package acme

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/pgtest"
)

var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// stores runs fn against an SQLite file and a PostgreSQL database; open
// opens (again) the same store with a key.
func stores(t *testing.T, fn func(t *testing.T, open func(key []byte) (*Storage, error), raw func() *sql.DB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "catalog.db")
		fn(t, func(key []byte) (*Storage, error) {
			return OpenStorage(context.Background(), StorageOptions{SQLite: path, Key: key})
		}, func() *sql.DB {
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pg.Database(t)
		fn(t, func(key []byte) (*Storage, error) {
			return OpenStorage(context.Background(), StorageOptions{Postgres: dsn, Key: key})
		}, func() *sql.DB {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		})
	})
}

func mustOpen(t *testing.T, open func([]byte) (*Storage, error), key []byte) *Storage {
	t.Helper()
	s, err := open(key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStorageKV(t *testing.T) {
	stores(t, func(t *testing.T, open func([]byte) (*Storage, error), _ func() *sql.DB) {
		ctx := context.Background()
		s := mustOpen(t, open, testKey(1))
		if _, err := s.Load(ctx, "certs/ca/a.example.com/a.key"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Load of nothing = %v, want fs.ErrNotExist", err)
		}
		for _, k := range []string{"certs/ca/a.example.com/a.crt", "certs/ca/a.example.com/a.key", "certs/ca/b.example.com/b.crt", "acme/x"} {
			if err := s.Store(ctx, k, []byte("value of "+k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Store(ctx, "acme/x", []byte("again")); err != nil { // overwrite
			t.Fatal(err)
		}
		if v, err := s.Load(ctx, "acme/x"); err != nil || string(v) != "again" {
			t.Fatalf("Load = %q, %v", v, err)
		}
		if !s.Exists(ctx, "certs/ca/a.example.com/a.crt") || s.Exists(ctx, "certs/ca") {
			t.Fatal("Exists is wrong")
		}
		got, err := s.List(ctx, "certs/ca", false)
		if want := "certs/ca/a.example.com certs/ca/b.example.com"; err != nil || strings.Join(got, " ") != want {
			t.Fatalf("List = %v, %v; want %s", got, err, want)
		}
		got, _ = s.List(ctx, "certs", true)
		if len(got) != 3 {
			t.Fatalf("recursive List = %v", got)
		}
		if ki, err := s.Stat(ctx, "certs/ca/a.example.com"); err != nil || ki.IsTerminal {
			t.Fatalf("Stat of a prefix = %+v, %v", ki, err)
		}
		if ki, err := s.Stat(ctx, "acme/x"); err != nil || !ki.IsTerminal || ki.Modified.IsZero() {
			t.Fatalf("Stat of a value = %+v, %v", ki, err)
		}
		if err := s.Delete(ctx, "certs/ca/a.example.com"); err != nil {
			t.Fatal(err)
		}
		if s.Exists(ctx, "certs/ca/a.example.com/a.key") || !s.Exists(ctx, "certs/ca/b.example.com/b.crt") {
			t.Fatal("Delete of a prefix removed the wrong keys")
		}
	})
}

// Keys are never in the clear: the raw row holds no byte of the value,
// and opening the store with another key file is an error at start.
func TestStorageEncrypted(t *testing.T) {
	stores(t, func(t *testing.T, open func([]byte) (*Storage, error), raw func() *sql.DB) {
		ctx := context.Background()
		s := mustOpen(t, open, testKey(1))
		secret := []byte("-----BEGIN EC PRIVATE KEY-----\nsecret-key-material\n-----END EC PRIVATE KEY-----\n")
		if err := s.Store(ctx, "certs/ca/a.example.com/a.key", secret); err != nil {
			t.Fatal(err)
		}
		var v []byte
		q := `SELECT value FROM levee_acme_kv WHERE key = 'certs/ca/a.example.com/a.key'`
		if err := raw().QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(v, []byte("secret-key-material")) || bytes.Contains(v, []byte("PRIVATE KEY")) {
			t.Fatalf("the key is stored in the clear: %q", v)
		}
		// The stored bytes alone, without the key file, open with nothing.
		if _, err := s.seal.open("certs/ca/a.example.com/a.key", v); err != nil {
			t.Fatalf("the right key does not open it: %v", err)
		}
		other, _ := newSealer(testKey(2))
		if _, err := other.open("certs/ca/a.example.com/a.key", v); !errors.Is(err, errUnsealed) {
			t.Fatalf("another key opens it: %v", err)
		}
		if _, err := s.seal.open("certs/ca/b.example.com/b.key", v); !errors.Is(err, errUnsealed) {
			t.Fatalf("the value opens under another key name: %v", err)
		}
		s.Close()
		if _, err := open(testKey(2)); err == nil || !strings.Contains(err.Error(), "tls.acme.key_file is not the key") {
			t.Fatalf("open with a wrong key file = %v, want a clear error", err)
		}
		s2 := mustOpen(t, open, testKey(1))
		if got, err := s2.Load(ctx, "certs/ca/a.example.com/a.key"); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("reopened with the right key: %q, %v", got, err)
		}
	})
}

// One lease per name across instances; a holder that stops renewing
// loses it once LockLease has passed.
func TestStorageLease(t *testing.T) {
	stores(t, func(t *testing.T, open func([]byte) (*Storage, error), _ func() *sql.DB) {
		ctx := context.Background()
		clk := clock.NewFake(time.Unix(1e9, 0))
		a, b := mustOpen(t, open, testKey(1)), mustOpen(t, open, testKey(1))
		a.clk, b.clk = clk, clk
		if ok, err := a.TryLock(ctx, "issue_cert_x"); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		if ok, err := b.TryLock(ctx, "issue_cert_x"); ok || err != nil {
			t.Fatalf("b took a held lease: %v %v", ok, err)
		}
		if err := b.Unlock(ctx, "issue_cert_x"); err != nil { // not b's: a no-op
			t.Fatal(err)
		}
		if ok, _ := b.TryLock(ctx, "issue_cert_x"); ok {
			t.Fatal("b's Unlock released a's lease")
		}
		if err := a.RenewLockLease(ctx, "issue_cert_x", LockLease); err != nil {
			t.Fatal(err)
		}
		clk.Advance(LockLease)
		if ok, _ := b.TryLock(ctx, "issue_cert_x"); ok {
			t.Fatal("b took the lease at its very end")
		}
		clk.Advance(time.Nanosecond)
		if ok, err := b.TryLock(ctx, "issue_cert_x"); !ok || err != nil {
			t.Fatalf("b after the lease ran out: %v %v", ok, err)
		}
		if err := a.RenewLockLease(ctx, "issue_cert_x", LockLease); err == nil {
			t.Fatal("a renewed a lease it lost")
		}
		// Lock waits; it gives up with its context.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Lock(cctx, "issue_cert_x") }()
		<-clk.TimerCreated()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock after cancel = %v", err)
		}
		if err := b.Unlock(ctx, "issue_cert_x"); err != nil {
			t.Fatal(err)
		}
		if err := a.Lock(ctx, "issue_cert_x"); err != nil {
			t.Fatalf("Lock of a free lease: %v", err)
		}
	})
}
