package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCatalogImportExportStatsAndCheck(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "catalog.db")
	yamlFile := filepath.Join(dir, "apps.yaml")
	os.WriteFile(yamlFile, []byte(`apps:
  shop: {hosts: [shop.test], backends: [127.0.0.1:9001]}
  photos: {hosts: [photos.test], paths: [/img], backends: [127.0.0.1:9002]}
`), 0o600)
	jsonlFile := filepath.Join(dir, "more.jsonl")
	os.WriteFile(jsonlFile, []byte(`{"name":"blog","hosts":["blog.test"],"backends":["127.0.0.1:9003"]}`+"\n"), 0o600)

	if code, out, errOut := runLevee(t, "catalog", "import", "--db", db, yamlFile); code != 0 || !strings.Contains(out, "2 added") {
		t.Fatalf("import yaml: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runLevee(t, "catalog", "import", "--db", db, jsonlFile); code != 0 || !strings.Contains(out, "1 added") {
		t.Fatalf("import jsonl: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runLevee(t, "catalog", "export", "--db", db)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `"name":"photos"`) {
		t.Fatalf("export: %d %q %q", code, out, errOut)
	}
	exported := filepath.Join(dir, "export.jsonl")
	os.WriteFile(exported, []byte(out), 0o600)
	if code, out, _ := runLevee(t, "catalog", "import", "--db", db, exported); code != 0 || !strings.Contains(out, "0 added, 0 changed, 3 unchanged") {
		t.Errorf("re-import of the export: %d %q", code, out)
	}
	if code, out, _ := runLevee(t, "catalog", "stats", "--db", db); code != 0 || !strings.Contains(out, "apps            3") {
		t.Errorf("stats: %d %q", code, out)
	}

	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"name":"x","hosts":["shop.test"],"backends":[]}`+"\n"), 0o600)
	if code, _, errOut := runLevee(t, "catalog", "import", "--db", db, bad); code != 1 || !strings.Contains(errOut, "apps.x.backends: at least one backend") {
		t.Errorf("bad import: %d %q", code, errOut)
	}

	cfg := writeTemp(t, `listen: 127.0.0.1:0
admin: 127.0.0.1:0
catalog: {sqlite: `+db+`}
apps:
  shop: {hosts: [other.test], backends: [127.0.0.1:9001]}
  mine: {hosts: [photos.test], paths: [/img], backends: [127.0.0.1:9001]}
`)
	code, out, errOut = runLevee(t, "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("check: %d %q %q", code, out, errOut)
	}
	for _, want := range []string{
		"warning: apps.shop: the catalog also has an app named shop",
		"warning: apps.mine: host photos.test path /img is also claimed by catalog app photos; the config file wins",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check stderr = %q, want %q", errOut, want)
		}
	}
	if code, out, _ := runLevee(t, "catalog", "stats", "--config", cfg); code != 0 || !strings.Contains(out, "apps            3") {
		t.Errorf("stats --config: %d %q", code, out)
	}
	missing := writeTemp(t, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\ncatalog: {sqlite: "+filepath.Join(dir, "nope.db")+"}\n")
	if code, _, errOut := runLevee(t, "check", "--config", missing); code != 1 || !strings.Contains(errOut, "catalog.sqlite:") {
		t.Errorf("check with a missing catalog file: %d %q", code, errOut)
	}
}

// TestServeRoutesACatalogApp: levee serve opens catalog.sqlite and routes
// a host the config file does not claim to the app stored for it; an app
// imported while it runs is served without a restart.
func TestServeRoutesACatalogApp(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "catalog.db")
	be := namedBackend(t, "stored")
	apps := filepath.Join(dir, "apps.jsonl")
	os.WriteFile(apps, []byte(`{"name":"s","hosts":["s.test"],"backends":["`+be+`"]}`+"\n"), 0o600)
	if code, _, errOut := runLevee(t, "catalog", "import", "--db", db, apps); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	s := startServe(t, listenLine()+"\nadmin: 127.0.0.1:0\ncatalog: {sqlite: "+db+", watch: 20ms}\n")
	if code, body, err := s.get("s.test", "/"); err != nil || code != 200 || body != "stored" {
		t.Fatalf("stored app: %d %q %v", code, body, err)
	}
	if code, _, _ := s.get("t.test", "/"); code != 404 {
		t.Fatalf("unknown host: %d", code)
	}
	os.WriteFile(apps, []byte(`{"name":"t","hosts":["t.test"],"backends":["`+be+`"]}`+"\n"), 0o600)
	if code, _, errOut := runLevee(t, "catalog", "import", "--db", db, apps); code != 0 {
		t.Fatalf("import while serving: %s", errOut)
	}
	s.eventually("t.test served after its import", func() (bool, string) {
		code, body, err := s.get("t.test", "/")
		return err == nil && code == 200 && body == "stored", fmt.Sprintf("%d %q %v", code, body, err)
	})
}
