package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const yamlApps = `
apps:
  shop:
    hosts: [shop.example, Www.Shop.Example]
    paths: [/, /api]
    backends: [127.0.0.1:9001]
    limits: {concurrency: 7, rate: 50/s}
  wild:
    hosts: ["*.users.example"]
    backends: [127.0.0.1:9002]
`

// newStore makes a catalog file in a temporary directory with the apps of yamlApps.
func newStore(t *testing.T) (w *Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "catalog.db")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	apps, err := ReadImport("apps.yaml", strings.NewReader(yamlApps))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Put(context.Background(), apps, t0); err != nil || res.Added != 2 {
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

func TestForHostExactAndWildcard(t *testing.T) {
	_, path := newStore(t)
	r := openRO(t, path)
	ctx := context.Background()
	recs, err := r.ForHost(ctx, "www.shop.example")
	if err != nil || len(recs) != 1 {
		t.Fatalf("www.shop.example: %+v %v", recs, err)
	}
	got := recs[0]
	if got.Name != "shop" || !slices.Equal(got.Hosts, []string{"shop.example", "www.shop.example"}) || !slices.Equal(got.Paths, []string{"/", "/api"}) {
		t.Errorf("shop = %+v", got)
	}
	a, err := config.ParseApp(got.Name, got.Config)
	if err != nil || a.Limits.Concurrency.Limit != 7 {
		t.Errorf("stored config does not parse back: %v %+v", err, a)
	}
	if recs, err := r.ForHost(ctx, "a.b.users.example"); err != nil || len(recs) != 1 || recs[0].Name != "wild" {
		t.Errorf("wildcard: %+v %v", recs, err)
	}
	if recs, err := r.ForHost(ctx, "users.example"); err != nil || len(recs) != 0 {
		t.Errorf("a wildcard must not match its own base name: %+v %v", recs, err)
	}
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
	if _, err := Open(filepath.Join(t.TempDir(), "missing.db"), Options{}); err == nil {
		t.Error("opening a missing file must fail, not create it")
	}
}

func TestPutRecordsChanges(t *testing.T) {
	w, path := newStore(t)
	r := openRO(t, path)
	ctx := context.Background()
	v0, err := r.Version(ctx)
	if err != nil || v0 != 2 {
		t.Fatalf("version %d %v, want 2", v0, err)
	}
	// The same apps again change nothing.
	apps, _ := ReadImport("apps.yaml", strings.NewReader(yamlApps))
	if res, err := w.Put(ctx, apps, t0); err != nil || res.Unchanged != 2 {
		t.Fatalf("re-put: %+v %v", res, err)
	}
	moved, err := ReadImport("x.jsonl", strings.NewReader(`{"name":"shop","hosts":["shop2.example"],"backends":["127.0.0.1:9001"]}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Put(ctx, moved, t0.Add(time.Second)); err != nil || res.Changed != 1 {
		t.Fatalf("update: %+v %v", res, err)
	}
	if n, err := w.Delete(ctx, []string{"wild", "nope"}, t0.Add(2*time.Second)); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	ch, err := r.Changes(ctx, v0, 10)
	if err != nil || len(ch) != 2 {
		t.Fatalf("changes: %+v %v", ch, err)
	}
	if ch[0].App != "shop" || !slices.Equal(ch[0].Hosts, []string{"shop2.example"}) || !ch[0].At.Equal(t0.Add(time.Second)) {
		t.Errorf("change 0 = %+v", ch[0])
	}
	if ch[1].App != "wild" || len(ch[1].Hosts) != 0 {
		t.Errorf("change 1 = %+v", ch[1])
	}
	if recs, _ := r.ForHost(ctx, "shop.example"); len(recs) != 0 {
		t.Errorf("shop.example still routes after the move: %+v", recs)
	}
	if recs, _ := r.Apps(ctx, []string{"shop", "wild"}); len(recs) != 1 || recs[0].Version != ch[0].Version {
		t.Errorf("apps after changes: %+v", recs)
	}
}

func TestChangesLost(t *testing.T) {
	w, path := newStore(t)
	r := openRO(t, path)
	ctx := context.Background()
	if _, err := w.db.Exec(`DELETE FROM changes WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Changes(ctx, 0, 10); err != nil {
		t.Errorf("from 0 (a watcher starting): %v", err)
	}
	w.Delete(ctx, []string{"shop", "wild"}, t0)
	if _, err := w.db.Exec(`DELETE FROM changes WHERE version <= 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Changes(ctx, 2, 10); !errors.Is(err, catalog.ErrChangesLost) {
		t.Errorf("err = %v, want ErrChangesLost", err)
	}
}

func TestPutRefusesAClaimedRoute(t *testing.T) {
	w, _ := newStore(t)
	apps, err := ReadImport("x.jsonl", strings.NewReader(`{"name":"thief","hosts":["SHOP.example"],"paths":["/api"],"backends":["127.0.0.1:1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Put(context.Background(), apps, t0)
	if err == nil || !strings.Contains(err.Error(), "host shop.example path /api is already claimed by app shop") {
		t.Fatalf("err = %v", err)
	}
	if recs, _ := w.Apps(context.Background(), []string{"thief"}); len(recs) != 0 {
		t.Error("a failed put wrote part of its apps")
	}
}

func TestReadImportReportsEveryProblem(t *testing.T) {
	src := `{"name":"a","hosts":["a.example"],"backends":["127.0.0.1:1"]}
{"name":"b","hosts":[],"backends":["127.0.0.1:1"]}
not json
{"name":"a","hosts":["c.example"],"backends":["127.0.0.1:1"]}
`
	_, err := ReadImport("apps.jsonl", strings.NewReader(src))
	for _, want := range []string{"apps.b.hosts: at least one host", "line 3:", "line 4: app a is already on line 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestExportImportsBack(t *testing.T) {
	w, _ := newStore(t)
	ctx := context.Background()
	var out bytes.Buffer
	if n, err := w.Export(ctx, &out); err != nil || n != 2 {
		t.Fatalf("export: %d %v", n, err)
	}
	apps, err := ReadImport("export.jsonl", &out)
	if err != nil || len(apps) != 2 {
		t.Fatalf("re-import: %v", err)
	}
	if res, err := w.Put(ctx, apps, t0); err != nil || res.Unchanged != 2 {
		t.Errorf("an export imported back must change nothing: %+v %v", res, err)
	}
	st, err := w.Stats(ctx)
	if err != nil || st.Apps != 2 || st.Routes != 5 || st.Hosts != 3 || st.WildcardHosts != 1 || st.Version != 2 || st.Bytes == 0 {
		t.Errorf("stats = %+v, %v", st, err)
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
