package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/catalog/sqlitestore"
)

// acmeCatalog makes a catalog file whose ACME store was written with
// key, and returns its path and a key file for each of key and other.
func acmeCatalog(t *testing.T, key, other byte) (db, keyFile, otherFile string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "catalog.db")
	w, err := sqlitestore.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	write := func(name string, b byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile, otherFile = write("acme.key", key), write("other.key", other)
	st, err := acme.OpenStorage(context.Background(), acme.StorageOptions{SQLite: db, Key: bytes.Repeat([]byte{key}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Store(context.Background(), "certs/ca/a.example.com/a.example.com.key", []byte("PRIVATE KEY")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return db, keyFile, otherFile
}

func acmeConfig(db, keyFile string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
catalog: {sqlite: %s}
tls:
  acme: {ca: "https://127.0.0.1:1/dir", key_file: %s}
apps:
  a: {hosts: [a.example.com], backends: ['127.0.0.1:9'], tls: acme}
`, db, keyFile)
}

// A key file that is not the one the store was written with stops
// levee serve at start, saying so; the right one starts it.
func TestServeRefusesAWrongACMEKeyFile(t *testing.T) {
	db, keyFile, otherFile := acmeCatalog(t, 1, 2)
	code, _, stderr := runLevee(t, "serve", "--config", writeTemp(t, acmeConfig(db, otherFile)))
	if code != 1 || !strings.Contains(stderr, "tls.acme.key_file is not the key the stored certificates were written with") {
		t.Fatalf("serve with a wrong key file: exit %d\nstderr:\n%s", code, stderr)
	}
	s := startServe(t, acmeConfig(db, keyFile))
	s.signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 0 {
		s.fatalf("serve with the right key file exited %d", code)
	}
}
