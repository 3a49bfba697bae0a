package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.yaml.in/yaml/v3"
)

// Catalog configures a large app catalog, in an SQLite file or a
// PostgreSQL database, loaded lazily beside the apps of the YAML config
// (which win where both claim a host and path). Off unless SQLite or
// Postgres is set (not both).
type Catalog struct {
	// SQLite is the path of the catalog file (see docs/architecture.md for
	// its schema); "" for none.
	SQLite string `yaml:"sqlite"`
	// Postgres is the DSN of the catalog database (a postgres:// URL or
	// key=value pairs, as libpq reads them); "" for none. Its password
	// belongs in a passfile (PGPASSFILE, passfile=) rather than here.
	Postgres string        `yaml:"postgres"`
	Cache    CatalogCache  `yaml:"cache"`
	Loader   CatalogLoader `yaml:"loader"`
	// Watch is how often the store is polled for changed apps: a change is
	// applied to the cached apps within about one interval (sooner with
	// Postgres, which notifies; the poll is its safety net).
	Watch Duration `yaml:"watch"`
}

// CatalogCache bounds the apps kept in memory.
type CatalogCache struct {
	// MaxApps bounds the cached hosts, and so the apps, in memory; past it
	// the least useful (SIEVE) is evicted and its state released.
	MaxApps int `yaml:"max_apps"`
	// MaxUnknown bounds the remembered unknown hosts (negative cache).
	MaxUnknown int `yaml:"max_unknown"`
	// UnknownTTL is how long an unknown host stays known as unknown.
	UnknownTTL Duration `yaml:"unknown_ttl"`
}

// CatalogLoader bounds the loading of cold apps from the file.
type CatalogLoader struct {
	// Concurrency is the most queries running at once; a cold host that
	// needs one more is refused at once (503 catalog-busy).
	Concurrency int `yaml:"concurrency"`
	// Rate bounds the loads started per second, so that a wave of cold
	// hosts cannot take the CPU the cached hosts' requests need; a cold
	// host over it is refused at once (503 catalog-busy). "off": no bound.
	Rate Rate `yaml:"rate"`
	// MaxWaiters bounds the requests waiting for a load already running.
	MaxWaiters int `yaml:"max_waiters"`
	// Timeout is the deadline of one load.
	Timeout Duration `yaml:"timeout"`
	// RetryAfter is what a refused request is told to wait.
	RetryAfter Duration `yaml:"retry_after"`
}

// Catalog defaults. Each is documented in docs/config.md; change both together.
const (
	DefaultCatalogMaxApps     = 10_000
	DefaultCatalogMaxUnknown  = 100_000
	DefaultCatalogUnknownTTL  = 5 * time.Second
	DefaultCatalogConcurrency = 8
	// DefaultCatalogLoadRate: a load (the store's query, ~120 µs) and the
	// app it composes (~45 µs: parse, compose, and the eviction it causes)
	// cost about 170 µs of CPU on the 2-core bench machine (bench/catalog.sh),
	// so cold waves take at most about a fifth of a core by default.
	DefaultCatalogLoadRate   = 1000
	DefaultCatalogMaxWaiters = 256
	DefaultCatalogTimeout    = 500 * time.Millisecond
	DefaultCatalogRetryAfter = time.Second
	DefaultCatalogWatch      = time.Second
)

// DefaultCatalog returns the catalog section's defaults (the catalog off).
func DefaultCatalog() Catalog {
	return Catalog{
		Cache: CatalogCache{MaxApps: DefaultCatalogMaxApps, MaxUnknown: DefaultCatalogMaxUnknown,
			UnknownTTL: Duration(DefaultCatalogUnknownTTL)},
		Loader: CatalogLoader{Concurrency: DefaultCatalogConcurrency, Rate: Rate{Events: DefaultCatalogLoadRate, Per: time.Second},
			MaxWaiters: DefaultCatalogMaxWaiters,
			Timeout:    Duration(DefaultCatalogTimeout), RetryAfter: Duration(DefaultCatalogRetryAfter)},
		Watch: Duration(DefaultCatalogWatch),
	}
}

// On says a catalog store is configured.
func (c *Catalog) On() bool { return c.SQLite != "" || c.Postgres != "" }

func (c *Catalog) validate(errs *Errors) {
	switch {
	case c.SQLite != "" && c.Postgres != "":
		errs.add("catalog.postgres", "set catalog.sqlite or catalog.postgres, not both")
	case c.Postgres != "":
		if _, err := pgconn.ParseConfig(c.Postgres); err != nil {
			errs.add("catalog.postgres", "%v", err) // pgconn leaves the password out
		}
	}
	within(errs, "catalog.cache.max_apps", c.Cache.MaxApps, 1, 100_000_000)
	within(errs, "catalog.cache.max_unknown", c.Cache.MaxUnknown, 0, 100_000_000)
	if c.Cache.UnknownTTL < 0 || c.Cache.UnknownTTL.D() > time.Hour {
		errs.add("catalog.cache.unknown_ttl", "must be 0..1h (got %s)", c.Cache.UnknownTTL)
	}
	within(errs, "catalog.loader.concurrency", c.Loader.Concurrency, 1, 1024)
	within(errs, "catalog.loader.max_waiters", c.Loader.MaxWaiters, 0, 1_000_000)
	if c.Loader.Timeout < Duration(time.Millisecond) || c.Loader.Timeout.D() > time.Minute {
		errs.add("catalog.loader.timeout", "must be 1ms..1m (got %s)", c.Loader.Timeout)
	}
	if c.Loader.RetryAfter < Duration(time.Second) || c.Loader.RetryAfter.D() > time.Hour {
		errs.add("catalog.loader.retry_after", "must be 1s..1h (got %s)", c.Loader.RetryAfter)
	}
	if c.Watch < Duration(10*time.Millisecond) || c.Watch.D() > time.Hour {
		errs.add("catalog.watch", "must be 10ms..1h (got %s)", c.Watch)
	}
}

// ParseApp decodes and validates one app's config (YAML or JSON, the form
// of apps.NAME in the config file) as the config file would: defaults
// first, then every problem reported with its field path.
func ParseApp(name string, data []byte) (*App, error) {
	if root, ok := jsonDocument(data); ok {
		return decodeApp(name, root)
	}
	root, err := parseDocument(data)
	if err != nil {
		return nil, Errors{{Path: "apps." + name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	return decodeApp(name, root)
}

func decodeApp(name string, n *yaml.Node) (*App, error) {
	a := DefaultApp()
	var errs Errors
	if n == nil || isNull(resolve(n)) {
		errs.add("apps."+name, "an app needs hosts and backends")
		return nil, errs
	}
	decodeValue(n, reflect.ValueOf(a).Elem(), "apps."+name, &errs)
	var verrs Errors
	validateApp(&verrs, name, a, map[string]string{})
	if a.TLS != nil {
		// A stored app's certificate that does not load fails only its
		// hosts' handshakes (the import refuses one: importTLS).
		checkAppTLS(&verrs, nil, "apps."+name+".tls", a.TLS, false)
	}
	if a.Upstream != nil {
		validateAppUpstream(&verrs, nil, "apps."+name+".upstream", a.Upstream)
	}
	for _, e := range verrs {
		if !covered(errs, e.Path) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return a, nil
}

// AppSource is one app read from an import file: its name, its config as
// written (JSON, to be stored as is) and that config decoded and validated.
type AppSource struct {
	Name   string
	Config []byte
	App    *App
}

// ParseAppsYAML reads the apps: section of a YAML document (a levee config
// file, or a file holding only apps:), validating each app alone and the
// routes of all of them together. Other top-level keys are ignored.
func ParseAppsYAML(data []byte) ([]AppSource, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, Errors{{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if root == nil || root.Kind != yaml.MappingNode {
		return nil, Errors{{Msg: "want a mapping with an apps: section"}}
	}
	var apps *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "apps" {
			apps = resolve(root.Content[i+1])
		}
	}
	if apps == nil || apps.Kind != yaml.MappingNode {
		return nil, Errors{{Path: "apps", Msg: "want a mapping of apps by name"}}
	}
	var out []AppSource
	var errs Errors
	routes := map[string]string{}
	rd := ownReader()
	for i := 0; i+1 < len(apps.Content); i += 2 {
		name, n := apps.Content[i].Value, apps.Content[i+1]
		var raw any
		if err := n.Decode(&raw); err != nil {
			errs.add("apps."+name, "%v", err)
			continue
		}
		m, _ := raw.(map[string]any)
		converted, err := importTLS(rd, name, m)
		if err != nil {
			errs = append(errs, err.(Errors)...)
			continue
		}
		blob, err := json.Marshal(raw)
		if err != nil {
			errs.add("apps."+name, "cannot be stored as JSON: %v", err)
			continue
		}
		var a *App
		if converted { // decoded from what is stored
			a, err = ParseApp(name, blob)
		} else {
			a, err = decodeApp(name, n)
		}
		if err == nil {
			err = storedTLS(name, a)
		}
		if err != nil {
			errs = append(errs, err.(Errors)...)
			continue
		}
		checkRoutes(&errs, "apps."+name, name, a, routes)
		out = append(out, AppSource{Name: name, Config: blob, App: a})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// ParseAppJSON reads one line of a JSONL import: an app's config with its
// name beside the other keys ({"name": "photos", "hosts": [...], ...}).
// line is the line number, for errors.
func ParseAppJSON(data []byte, line int) (AppSource, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return AppSource{}, Errors{{Path: fmt.Sprintf("line %d", line), Msg: err.Error()}}
	}
	name, _ := m["name"].(string)
	if name == "" {
		return AppSource{}, Errors{{Path: fmt.Sprintf("line %d", line), Msg: `want a string "name"`}}
	}
	delete(m, "name")
	if _, err := importTLS(ownReader(), name, m); err != nil {
		return AppSource{}, err
	}
	blob, err := json.Marshal(m)
	if err != nil {
		return AppSource{}, Errors{{Path: fmt.Sprintf("line %d", line), Msg: err.Error()}}
	}
	a, err := ParseApp(name, blob)
	if err == nil {
		err = storedTLS(name, a)
	}
	if err != nil {
		return AppSource{}, err
	}
	return AppSource{Name: name, Config: blob, App: a}, nil
}

// importTLS reads the certificate and key files an imported app's tls
// names into cert_pem and key_pem, as the catalog stores them; converted
// says it did. m is the app's config as decoded (nil: nothing to do).
func importTLS(rd reader, name string, m map[string]any) (converted bool, err error) {
	t, _ := m["tls"].(map[string]any)
	if t == nil {
		return false, nil
	}
	certFile, _ := t["cert"].(string)
	keyFile, _ := t["key"].(string)
	if certFile == "" && keyFile == "" {
		return false, nil
	}
	p := "apps." + name + ".tls"
	var errs Errors
	if certFile == "" || keyFile == "" {
		errs.add(p, "both cert and key are required")
		return false, errs
	}
	cert, err := rd.read(certFile, MaxPEMBytes)
	if err != nil {
		errs.add(p+".cert", "%v", err)
		return false, errs
	}
	key, err := rd.read(keyFile, MaxPEMBytes)
	if err != nil {
		errs.add(p+".key", "%v", err)
		return false, errs
	}
	delete(t, "cert")
	delete(t, "key")
	t["cert_pem"], t["key_pem"] = string(cert), string(key)
	return true, nil
}

// storedTLS refuses, at import, a certificate that would not load: only
// one that got into a catalog another way fails at the handshake.
func storedTLS(name string, a *App) error {
	if a.TLS == nil {
		return nil
	}
	if _, err := a.TLS.Certificate(); err != nil {
		return Errors{{Path: "apps." + name + ".tls", Msg: "cannot load certificate: " + err.Error()}}
	}
	return nil
}
