package config

import (
	"strings"
	"testing"
)

func TestParseAppJSONAndYAML(t *testing.T) {
	a, err := ParseApp("shop", []byte(`{"hosts": ["shop.example"], "backends": ["127.0.0.1:9001"], "limits": {"concurrency": 7}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Limits.Concurrency.Limit != 7 || a.Limits.Queue.MaxLen != DefaultQueueMaxLen || a.Paths[0] != "/" {
		t.Errorf("defaults or values lost: %+v", a.Limits)
	}
	_, err = ParseApp("shop", []byte(`{"hosts": ["shop.example"], "backends": [], "limits": {"concurency": 7}}`))
	for _, want := range []string{"apps.shop.limits.concurency: unknown key", "apps.shop.backends: at least one backend"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
}

func TestParseAppsYAML(t *testing.T) {
	src := []byte("listen: 127.0.0.1:8080\napps:\n  a: {hosts: [a.example], backends: [127.0.0.1:1]}\n  b: {hosts: [b.example], backends: [127.0.0.1:2], limits: {rate: 5/s}}\n")
	apps, err := ParseAppsYAML(src)
	if err != nil || len(apps) != 2 {
		t.Fatalf("apps %v, err %v", apps, err)
	}
	if apps[1].Name != "b" || !strings.Contains(string(apps[1].Config), `"rate":"5/s"`) || apps[1].App.Limits.Rate.PerSecond() != 5 {
		t.Errorf("b = %s %+v", apps[1].Config, apps[1].App.Limits.Rate)
	}
	_, err = ParseAppsYAML([]byte("apps:\n  a: {hosts: [x.example], backends: [127.0.0.1:1]}\n  b: {hosts: [X.example], backends: [127.0.0.1:2]}\n"))
	if err == nil || !strings.Contains(err.Error(), "apps.b: host X.example path / is already claimed by app a") {
		t.Errorf("a route claimed twice: err = %v", err)
	}
}

func TestParseAppJSONLine(t *testing.T) {
	s, err := ParseAppJSON([]byte(`{"name": "c", "hosts": ["c.example"], "backends": ["127.0.0.1:3"]}`), 3)
	if err != nil || s.Name != "c" || strings.Contains(string(s.Config), "name") {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := ParseAppJSON([]byte(`{"hosts": []}`), 4); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("no name: err = %v", err)
	}
}

func TestCatalogValidate(t *testing.T) {
	_, err := Parse([]byte("catalog: {cache: {max_apps: 0}, loader: {concurrency: 0, timeout: 0s}, watch: 1ms}\n"))
	for _, want := range []string{"catalog.cache.max_apps", "catalog.loader.concurrency", "catalog.loader.timeout", "catalog.watch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %s", err, want)
		}
	}
}

func TestCatalogPostgres(t *testing.T) {
	cfg, err := Parse([]byte("catalog: {postgres: 'host=/run/postgresql dbname=levee'}\n"))
	if err != nil || cfg.Catalog.Postgres != "host=/run/postgresql dbname=levee" || !cfg.Catalog.On() {
		t.Fatalf("%+v %v", cfg.Catalog, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"catalog: {sqlite: /tmp/c.db, postgres: 'dbname=levee'}", "catalog.postgres: set catalog.sqlite or catalog.postgres, not both"},
		{"catalog: {postgres: 'postgres://levee:hunter2@[::1'}", "catalog.postgres: cannot parse"},
		{"catalog: {postgres: 'dbname=levee connect_timeout=soon'}", "catalog.postgres: cannot parse"},
	} {
		_, err := Parse([]byte(c.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: err = %v, want %q (and no password)", c.yaml, err, c.want)
		}
	}
}

// BenchmarkParseAppStored is a stored app's decode, as a cold host pays it:
// the JSON the catalog holds, and the same app as YAML for comparison.
func BenchmarkParseAppStored(b *testing.B) {
	for _, tc := range []struct{ name, doc string }{
		{"json", `{"hosts":["shop.example","*.shop.example"],"backends":["127.0.0.1:9001",{"addr":"127.0.0.1:9002","weight":2}],"limits":{"concurrency":64,"rate":"100/s"}}`},
		{"yaml", "hosts: [shop.example, '*.shop.example']\nbackends: [127.0.0.1:9001, {addr: 127.0.0.1:9002, weight: 2}]\nlimits: {concurrency: 64, rate: 100/s}\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseApp("shop", []byte(tc.doc)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
