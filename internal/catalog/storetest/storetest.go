// Package storetest holds the behaviour every catalog.Store must share,
// written once and run over each store (sqlitestore, pgstore): lookups by
// exact host and wildcard, the changes writes record, pruned changes, a
// claimed route refused, export and stats.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// Store is a catalog store as the tests write and read it.
type Store interface {
	catalog.Store
	Put(ctx context.Context, apps []config.AppSource, now time.Time) (catalog.PutResult, error)
	Delete(ctx context.Context, names []string, now time.Time) (int, error)
	NoteCertificates(ctx context.Context, hosts []string, now time.Time) error
	Export(ctx context.Context, w io.Writer) (int, error)
	Stats(ctx context.Context) (catalog.StoreStats, error)
}

// Harness makes the stores the tests run on.
type Harness struct {
	// New returns an empty catalog's writer and a reader of the same
	// catalog (opened as levee serve opens it; it may be w itself). Both
	// are closed when t ends.
	New func(t *testing.T) (w, r Store)
	// DropChanges deletes the change rows up to version upTo, as pruning
	// does, behind the store's back.
	DropChanges func(t *testing.T, w Store, upTo int64)
}

// T0 is the time of the tests' writes.
var T0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// YAMLApps are the apps every test starts with: two, at versions 1 and 2.
const YAMLApps = `
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

// Run runs every shared test over h's stores.
func Run(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"ForHostExactAndWildcard", testForHost},
		{"PutRecordsChanges", testPutRecordsChanges},
		{"ChangesLost", testChangesLost},
		{"NoteCertificates", testNoteCertificates},
		{"PutRefusesAClaimedRoute", testClaimedRoute},
		{"ExportImportsBack", testExport},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, h) })
	}
}

// Apps parses an import file's text (name says its format, as a file name would).
func Apps(t *testing.T, name, src string) []config.AppSource {
	t.Helper()
	apps, err := config.ReadImport(name, strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	return apps
}

// newStore is h.New with YAMLApps put.
func newStore(t *testing.T, h Harness) (w, r Store) {
	t.Helper()
	w, r = h.New(t)
	if res, err := w.Put(context.Background(), Apps(t, "apps.yaml", YAMLApps), T0); err != nil || res.Added != 2 {
		t.Fatalf("put: %+v %v", res, err)
	}
	return w, r
}

func testForHost(t *testing.T, h Harness) {
	_, r := newStore(t, h)
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

func testPutRecordsChanges(t *testing.T, h Harness) {
	w, r := newStore(t, h)
	ctx := context.Background()
	v0, err := r.Version(ctx)
	if err != nil || v0 != 2 {
		t.Fatalf("version %d %v, want 2", v0, err)
	}
	// The same apps again change nothing.
	if res, err := w.Put(ctx, Apps(t, "apps.yaml", YAMLApps), T0); err != nil || res.Unchanged != 2 {
		t.Fatalf("re-put: %+v %v", res, err)
	}
	moved := Apps(t, "x.jsonl", `{"name":"shop","hosts":["shop2.example"],"backends":["127.0.0.1:9001"]}`+"\n")
	if res, err := w.Put(ctx, moved, T0.Add(time.Second)); err != nil || res.Changed != 1 {
		t.Fatalf("update: %+v %v", res, err)
	}
	if n, err := w.Delete(ctx, []string{"wild", "nope"}, T0.Add(2*time.Second)); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	ch, err := r.Changes(ctx, v0, 10)
	if err != nil || len(ch) != 2 {
		t.Fatalf("changes: %+v %v", ch, err)
	}
	if ch[0].App != "shop" || !slices.Equal(ch[0].Hosts, []string{"shop2.example"}) || !ch[0].At.Equal(T0.Add(time.Second)) {
		t.Errorf("change 0 = %+v", ch[0])
	}
	if ch[1].App != "wild" || len(ch[1].Hosts) != 0 || ch[1].Version <= ch[0].Version {
		t.Errorf("change 1 = %+v", ch[1])
	}
	if v, err := r.Version(ctx); err != nil || v != ch[1].Version {
		t.Errorf("version %d %v, want %d", v, err, ch[1].Version)
	}
	if recs, _ := r.ForHost(ctx, "shop.example"); len(recs) != 0 {
		t.Errorf("shop.example still routes after the move: %+v", recs)
	}
	if recs, _ := r.Apps(ctx, []string{"shop", "wild"}); len(recs) != 1 || recs[0].Version != ch[0].Version {
		t.Errorf("apps after changes: %+v", recs)
	}
}

// A certificate note is a change of catalog.CertificateApp, in the feed
// after the apps' changes, that changes no app.
func testNoteCertificates(t *testing.T, h Harness) {
	w, r := newStore(t, h)
	ctx := context.Background()
	v0, _ := r.Version(ctx)
	if err := w.NoteCertificates(ctx, []string{"Shop.example", "www.shop.example"}, T0); err != nil {
		t.Fatal(err)
	}
	ch, err := r.Changes(ctx, v0, 10)
	if err != nil || len(ch) != 1 {
		t.Fatalf("changes: %+v %v", ch, err)
	}
	if c := ch[0]; !c.Certificate() || !slices.Equal(c.Hosts, []string{"shop.example", "www.shop.example"}) ||
		c.Version <= v0 || !c.At.Equal(T0) {
		t.Errorf("change = %+v", c)
	}
	if recs, _ := r.ForHost(ctx, "shop.example"); len(recs) != 1 || recs[0].Name != "shop" {
		t.Errorf("shop.example after the note: %+v", recs)
	}
}

func testChangesLost(t *testing.T, h Harness) {
	w, r := newStore(t, h)
	ctx := context.Background()
	h.DropChanges(t, w, 1)
	if _, err := r.Changes(ctx, 0, 10); err != nil {
		t.Errorf("from 0 (a watcher starting): %v", err)
	}
	if _, err := w.Delete(ctx, []string{"shop", "wild"}, T0); err != nil {
		t.Fatal(err)
	}
	h.DropChanges(t, w, 3)
	if _, err := r.Changes(ctx, 2, 10); !errors.Is(err, catalog.ErrChangesLost) {
		t.Errorf("err = %v, want ErrChangesLost", err)
	}
}

func testClaimedRoute(t *testing.T, h Harness) {
	w, r := newStore(t, h)
	apps := Apps(t, "x.jsonl", `{"name":"thief","hosts":["SHOP.example"],"paths":["/api"],"backends":["127.0.0.1:1"]}`)
	_, err := w.Put(context.Background(), apps, T0)
	if err == nil || !strings.Contains(err.Error(), "host shop.example path /api is already claimed by app shop") {
		t.Fatalf("err = %v", err)
	}
	if recs, _ := r.Apps(context.Background(), []string{"thief"}); len(recs) != 0 {
		t.Error("a failed put wrote part of its apps")
	}
}

func testExport(t *testing.T, h Harness) {
	w, _ := newStore(t, h)
	ctx := context.Background()
	var out bytes.Buffer
	if n, err := w.Export(ctx, &out); err != nil || n != 2 {
		t.Fatalf("export: %d %v", n, err)
	}
	apps, err := config.ReadImport("export.jsonl", &out)
	if err != nil || len(apps) != 2 {
		t.Fatalf("re-import: %v", err)
	}
	if res, err := w.Put(ctx, apps, T0); err != nil || res.Unchanged != 2 {
		t.Errorf("an export imported back must change nothing: %+v %v", res, err)
	}
	st, err := w.Stats(ctx)
	if err != nil || st.Apps != 2 || st.Routes != 5 || st.Hosts != 3 || st.WildcardHosts != 1 || st.Version != 2 || st.Bytes == 0 {
		t.Errorf("stats = %+v, %v", st, err)
	}
}
