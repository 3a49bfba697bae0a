package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/pgtest"
)

// pg is the package's PostgreSQL server, started by the first test that
// needs it and stopped by TestMain; each test has a database of its own.
var pg pgtest.Shared

// skipH2C: the PostgreSQL catalog does not depend on the proxy's protocol;
// the h2c rerun of the package leaves these tests out, and their server.
func skipH2C(t *testing.T) {
	if testH2C() {
		t.Skip("the catalog store does not depend on the listener's protocol (run over HTTP/1.1)")
	}
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPostgresCatalogImportExportStatsAndCheck(t *testing.T) {
	skipH2C(t)
	dsn := pg.Database(t)
	dir := t.TempDir()
	apps := writeFile(t, filepath.Join(dir, "apps.yaml"), `apps:
  shop: {hosts: [shop.test], backends: [127.0.0.1:9001]}
  photos: {hosts: [photos.test], paths: [/img], backends: [127.0.0.1:9002]}
`)
	cfg := writeTemp(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\ncatalog: {postgres: '"+dsn+"'}\n"+
		"apps:\n  shop: {hosts: [other.test], backends: [127.0.0.1:9001]}\n")
	if code, _, errOut := runLevee(t, "check", "--config", cfg); code != 1 || !strings.Contains(errOut, "catalog.postgres: pgstore: the database holds no levee catalog") {
		t.Errorf("check of an empty database: %d %q", code, errOut)
	}
	if code, out, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 || !strings.Contains(out, "2 added") {
		t.Fatalf("import: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runLevee(t, "catalog", "export", "--config", cfg)
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"name":"photos"`) {
		t.Fatalf("export: %d %q %q", code, out, errOut)
	}
	exported := writeFile(t, filepath.Join(dir, "export.jsonl"), out)
	if code, out, _ := runLevee(t, "catalog", "import", "--postgres", dsn, exported); code != 0 || !strings.Contains(out, "0 added, 0 changed, 2 unchanged") {
		t.Errorf("re-import of the export: %d %q", code, out)
	}
	if code, out, _ := runLevee(t, "catalog", "stats", "--postgres", dsn); code != 0 || !strings.Contains(out, "apps            2") {
		t.Errorf("stats: %d %q", code, out)
	}
	code, out, errOut = runLevee(t, "check", "--config", cfg)
	if code != 0 || !strings.Contains(errOut, "warning: apps.shop: the catalog also has an app named shop") {
		t.Errorf("check: %d %q %q", code, out, errOut)
	}
	bad := writeTemp(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\ncatalog: {postgres: 'postgres://levee:hunter2@[::1'}\n")
	if code, _, errOut := runLevee(t, "check", "--config", bad); code != 1 || !strings.Contains(errOut, "catalog.postgres: cannot parse") || strings.Contains(errOut, "hunter2") {
		t.Errorf("check of a bad DSN: %d %q", code, errOut)
	}
	if code, _, errOut := runLevee(t, "catalog", "stats", "--postgres", dsn, "--db", "x.db"); code != 2 || !strings.Contains(errOut, "want one of") {
		t.Errorf("two sources: %d %q", code, errOut)
	}
}

// TestThreeInstancesSeeAChangeWithinASecond: three levee serve processes
// on one PostgreSQL catalog; a change imported into it reaches all three
// within a second of the import: a changed app, and an app for a host
// they had just cached as unknown. catalog.watch is a minute, so only the
// write's NOTIFY can bring the change that soon.
func TestThreeInstancesSeeAChangeWithinASecond(t *testing.T) {
	skipH2C(t)
	dsn := pg.Database(t)
	dir := t.TempDir()
	one, two := namedBackend(t, "one"), namedBackend(t, "two")
	apps := filepath.Join(dir, "apps.jsonl")
	writeFile(t, apps, `{"name":"s","hosts":["s.test"],"backends":["`+one+`"]}`+"\n")
	if code, _, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	cfg := listenLine() + "\nadmin: 127.0.0.1:0\ncatalog: {postgres: '" + dsn + "', watch: 1m, cache: {unknown_ttl: 1m}}\n"
	var levees []*serveProc
	for range 3 {
		levees = append(levees, startServe(t, cfg))
	}
	for i, s := range levees {
		if code, body, err := s.get("s.test", "/"); err != nil || code != 200 || body != "one" {
			t.Fatalf("levee %d: s.test: %d %q %v", i, code, body, err)
		}
		if code, _, err := s.get("new.test", "/"); err != nil || code != 404 {
			t.Fatalf("levee %d: new.test before its import: %d %v", i, code, err)
		}
	}
	writeFile(t, apps, `{"name":"s","hosts":["s.test"],"backends":["`+two+`"]}`+"\n"+
		`{"name":"n","hosts":["new.test"],"backends":["`+two+`"]}`+"\n")
	if code, out, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 || !strings.Contains(out, "1 added, 1 changed") {
		t.Fatalf("import of the change: %d %q %s", code, out, errOut)
	}
	imported := time.Now()
	for i, s := range levees {
		for _, host := range []string{"s.test", "new.test"} {
			within(t, imported.Add(time.Second), fmt.Sprintf("levee %d serves %s from backend two", i, host), func() (bool, string) {
				code, body, err := s.get(host, "/")
				return err == nil && code == 200 && body == "two", fmt.Sprintf("%d %q %v", code, body, err)
			})
		}
	}

	// Their listeners killed, the instances reconnect, poll for what they
	// may have missed, and the next change still reaches them all.
	pg.Server(t).Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'levee catalog listener'`)
	writeFile(t, apps, `{"name":"s","hosts":["s.test"],"backends":["`+one+`"]}`+"\n")
	if code, out, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 || !strings.Contains(out, "1 changed") {
		t.Fatalf("import after the listeners died: %d %q %s", code, out, errOut)
	}
	for i, s := range levees {
		s.eventually(fmt.Sprintf("levee %d serves s.test from backend one again", i), func() (bool, string) {
			code, body, err := s.get("s.test", "/")
			return err == nil && code == 200 && body == "one", fmt.Sprintf("%d %q %v", code, body, err)
		})
	}
}

// within polls cond until it holds, failing at deadline with its last report.
func within(t *testing.T, deadline time.Time, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not by the deadline; last: %s", what, last)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not an ordering sleep
	}
}

// TestPostgresDownCachedServedColdRefused: with the catalog database
// stopped, a cached app keeps being served, a cold one is refused with
// 503 catalog-unavailable and Retry-After within the loader's deadline;
// once the database is back, levee reconnects and loads it.
func TestPostgresDownCachedServedColdRefused(t *testing.T) {
	skipH2C(t)
	srv := pgtest.Start(t)
	dsn := srv.Database(t)
	be := namedBackend(t, "stored")
	apps := writeFile(t, filepath.Join(t.TempDir(), "apps.jsonl"),
		`{"name":"a","hosts":["a.test"],"backends":["`+be+`"]}`+"\n"+`{"name":"b","hosts":["b.test"],"backends":["`+be+`"]}`+"\n")
	if code, _, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	s := startServe(t, listenLine()+"\nadmin: 127.0.0.1:0\ncatalog: {postgres: '"+dsn+"', watch: 50ms, loader: {timeout: 500ms, retry_after: 2s}}\n")
	if code, body, err := s.get("a.test", "/"); err != nil || code != 200 || body != "stored" {
		t.Fatalf("a.test: %d %q %v", code, body, err)
	}
	srv.Stop()
	for range 3 {
		if code, body, err := s.get("a.test", "/"); err != nil || code != 200 || body != "stored" {
			t.Fatalf("cached a.test with the database down: %d %q %v", code, body, err)
		}
		start := time.Now()
		resp, err := s.client.Do(hostRequest(t, s.proxy, "b.test"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(start); resp.StatusCode != 503 || resp.Header.Get("Levee-Reject") != "catalog-unavailable" ||
			resp.Header.Get("Retry-After") != "2" || d > 2*time.Second {
			t.Fatalf("cold b.test with the database down: %d %v after %v", resp.StatusCode, resp.Header, d)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	s.eventually("b.test loads once the database is back", func() (bool, string) {
		code, body, err := s.get("b.test", "/")
		return err == nil && code == 200 && body == "stored", fmt.Sprintf("%d %q %v", code, body, err)
	})
}

func hostRequest(t *testing.T, base, host string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return req
}
