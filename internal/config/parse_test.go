package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const exampleConfig = `
listen: 127.0.0.1:8080
admin: 127.0.0.1:9901
apps:
  photos:
    hosts: [photos.example.com, "*.photos.example.com"]
    paths: [/]
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
    limits:
      concurrency: 256
      queue: {max_wait: 50ms, max_len: 1024}
      body: 10MB
`

// okApp is a minimal valid app, for tests about other sections.
const okApp = `{hosts: [a.example.com], backends: ["127.0.0.1:9001"]}`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", src, err)
	}
	if cfg == nil {
		t.Fatal("Parse returned neither a config nor an error")
	}
	return cfg
}

func parseErrs(t *testing.T, src string) Errors {
	t.Helper()
	cfg, err := Parse([]byte(src))
	if err == nil {
		t.Fatalf("Parse:\n%s\nsucceeded, want errors", src)
	}
	if cfg != nil {
		t.Error("Parse returned a config with its errors")
	}
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("Parse error %T %v, want non-empty config.Errors", err, err)
	}
	return es
}

// find returns the error at path whose message contains frag.
func find(es Errors, path, frag string) (FieldError, bool) {
	for _, e := range es {
		if e.Path == path && strings.Contains(e.Msg, frag) {
			return e, true
		}
	}
	return FieldError{}, false
}

func wantErr(t *testing.T, es Errors, path, frag string) {
	t.Helper()
	if _, ok := find(es, path, frag); !ok {
		t.Errorf("no error at %q containing %q; got:\n%v", path, frag, es)
	}
}

// TestParseExample reads the example config; the defaults it gets are the
// golden files' (testdata/*.golden), not restated here.
func TestParseExample(t *testing.T) {
	cfg := mustParse(t, exampleConfig)
	if want := (Listeners{{Addr: "127.0.0.1:8080"}}); !reflect.DeepEqual(cfg.Listen, want) {
		t.Errorf("Listen = %+v, want %+v", cfg.Listen, want)
	}
	if want := (Admin{Addr: "127.0.0.1:9901"}); cfg.Admin != want {
		t.Errorf("Admin = %+v, want %+v", cfg.Admin, want)
	}
	if cfg.Cluster.Enabled() {
		t.Error("cluster on without redis")
	}
	if got := cfg.AppNames(); !reflect.DeepEqual(got, []string{"photos"}) {
		t.Fatalf("AppNames() = %v", got)
	}
	got := cfg.Apps["photos"]
	if want := []string{"photos.example.com", "*.photos.example.com"}; !reflect.DeepEqual(got.Hosts, want) {
		t.Errorf("hosts = %v, want %v", got.Hosts, want)
	}
	if want := []Backend{{Addr: "127.0.0.1:9001", Weight: 1}, {Addr: "127.0.0.1:9002", Weight: 1}}; !reflect.DeepEqual(got.Backends, want) {
		t.Errorf("backends = %v, want %v", got.Backends, want)
	}
}

func TestParseAppDefaults(t *testing.T) {
	cfg := mustParse(t, "apps: {a: "+okApp+"}")
	a := cfg.Apps["a"]
	if !reflect.DeepEqual(a.Limits, DefaultApp().Limits) {
		t.Errorf("limits = %+v, want defaults %+v", a.Limits, DefaultApp().Limits)
	}
	if !reflect.DeepEqual(a.Paths, []string{"/"}) {
		t.Errorf("paths = %v, want [/]", a.Paths)
	}
	// Setting one limit keeps the others' defaults.
	cfg = mustParse(t, "apps: {a: {hosts: [a.example.com], backends: [\"127.0.0.1:1\"], limits: {queue: {max_len: 7}}}}")
	want := DefaultApp().Limits
	want.Queue.MaxLen = 7
	if got := cfg.Apps["a"].Limits; !reflect.DeepEqual(got, want) {
		t.Errorf("limits = %+v, want %+v", got, want)
	}
}

func TestParseEmptyDocumentIsDefault(t *testing.T) {
	for _, src := range []string{"", "\n", "# only a comment\n", "---\n", "~\n", "null"} {
		cfg := mustParse(t, src)
		if !reflect.DeepEqual(*cfg, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", src, *cfg)
		}
	}
}

func TestParseListen(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want Listeners
	}{
		{"scalar", "listen: 127.0.0.1:80", Listeners{{Addr: "127.0.0.1:80"}}},
		{"list of strings", "listen: [127.0.0.1:80, \"[::1]:81\", \":82\"]",
			Listeners{{Addr: "127.0.0.1:80"}, {Addr: "[::1]:81"}, {Addr: ":82"}}},
		{"list of mappings", "listen:\n  - addr: 127.0.0.1:80\n  - {addr: 127.0.0.1:81, h2c: true}\n",
			Listeners{{Addr: "127.0.0.1:80"}, {Addr: "127.0.0.1:81", H2C: true}}},
		{"mixed", "listen: [127.0.0.1:80, {addr: 'localhost:81', h2c: true}]",
			Listeners{{Addr: "127.0.0.1:80"}, {Addr: "localhost:81", H2C: true}}},
		{"tls null", "listen: [{addr: 127.0.0.1:80, tls: ~}]", Listeners{{Addr: "127.0.0.1:80"}}},
		{"null keeps default", "listen:", Listeners{{Addr: DefaultListen}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.src)
			if !reflect.DeepEqual(cfg.Listen, tt.want) {
				t.Errorf("Listen = %+v, want %+v", cfg.Listen, tt.want)
			}
		})
	}
}

func TestParseListenTLS(t *testing.T) {
	cert, key := writeCert(t)
	src := "listen:\n  - addr: 127.0.0.1:8443\n    tls: {cert: " + cert + ", key: " + key + "}\n  - {addr: 127.0.0.1:8080, h2c: true}\n"
	cfg := mustParse(t, src)
	want := Listeners{
		{Addr: "127.0.0.1:8443", TLS: &TLS{Cert: cert, Key: key}},
		{Addr: "127.0.0.1:8080", H2C: true},
	}
	if !reflect.DeepEqual(cfg.Listen, want) {
		t.Errorf("Listen = %+v, want %+v", cfg.Listen, want)
	}
}

func TestParseBackends(t *testing.T) {
	tests := []struct {
		name     string
		backends string
		want     []Backend
	}{
		{"strings", `["127.0.0.1:1", "localhost:2"]`, []Backend{{"127.0.0.1:1", 1}, {"localhost:2", 1}}},
		{"mappings", `[{addr: "10.0.0.1:80", weight: 3}, {addr: "10.0.0.2:80"}]`, []Backend{{"10.0.0.1:80", 3}, {"10.0.0.2:80", 1}}},
		{"mixed", `["b.internal:80", {addr: "c.internal:80", weight: 1000}]`, []Backend{{"b.internal:80", 1}, {"c.internal:80", 1000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "apps: {a: {hosts: [a.example.com], backends: "+tt.backends+"}}")
			if got := cfg.Apps["a"].Backends; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("backends = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// appWith returns a config whose app "a" is valid apart from the given fields.
func appWith(fields string) string {
	return `apps: {a: {hosts: [a.example.com], backends: ["127.0.0.1:9001"], ` + fields + `}}`
}

// TestValidationRules has one row per rule in validate.go; each row must
// produce exactly one error, at path, containing frag.
func TestValidationRules(t *testing.T) {
	tests := []struct {
		name, src, path, frag string
	}{
		// listen and admin
		{"no listener", "listen: []", "listen", "at least one listener is required"},
		{"listen not host:port", "listen: nope", "listen[0].addr", `"nope" is not host:port`},
		{"listen host not IP", "listen: example.com:80", "listen[0].addr", `host "example.com" must be an IP address or localhost`},
		{"listen port range", "listen: 127.0.0.1:70000", "listen[0].addr", `port "70000" must be 0..65535`},
		{"listen port name", "listen: 127.0.0.1:http", "listen[0].addr", `port "http" must be 0..65535`},
		{"listen reused", "listen: [127.0.0.1:80, 127.0.0.1:80]", "listen[1].addr", "address 127.0.0.1:80 is already used by listen[0].addr"},
		{"admin reuses listen", "listen: 127.0.0.1:80\nadmin: 127.0.0.1:80", "admin.addr", "already used by listen[0].addr"},
		{"admin not host:port", "admin: 9901", "admin.addr", `"9901" is not host:port`},
		{"admin mapping not host:port", "admin: {addr: 9901}", "admin.addr", `"9901" is not host:port`},
		{"admin unknown key", "admin: {addr: 127.0.0.1:9901, token: x}", "admin.token", "unknown key"},
		{"admin pprof not bool", "admin: {pprof: maybe}", "admin.pprof", `"maybe" is not a valid bool`},
		{"admin on every IPv4 address without a token", "admin: 0.0.0.0:9901", "admin.token_file", "beyond loopback"},
		{"admin on every IPv6 address without a token", "admin: '[::]:9901'", "admin.token_file", "beyond loopback"},
		{"admin on an empty host without a token", "admin: ':9901'", "admin.token_file", "beyond loopback"},
		{"admin on a LAN IP without a token", "admin: {addr: 192.168.1.7:9901}", "admin.token_file", "beyond loopback"},
		{"admin token file missing", "admin: {token_file: /nonexistent/token}", "admin.token_file", "no such file"},
		{"admin token file a directory", "admin: {token_file: /}", "admin.token_file", "not a regular file"},
		{"tls without key", "listen: [{addr: 127.0.0.1:443, tls: {cert: c.pem}}]", "listen[0].tls", "both cert and key are required"},
		{"tls missing files", "listen: [{addr: 127.0.0.1:443, tls: {cert: /nonexistent/c.pem, key: /nonexistent/k.pem}}]", "listen[0].tls.cert", "no such file"},
		// server
		{"read_header_timeout", "server: {read_header_timeout: 0s}", "server.read_header_timeout", "must be > 0 (got 0s)"},
		{"read_timeout", "server: {read_timeout: -1s}", "server.read_timeout", "must be > 0"},
		{"write_timeout", "server: {write_timeout: 0s}", "server.write_timeout", "must be > 0"},
		{"idle_timeout", "server: {idle_timeout: 0s}", "server.idle_timeout", "must be > 0"},
		{"drain_timeout", "server: {drain_timeout: 0s}", "server.drain_timeout", "must be > 0"},
		{"max_header_bytes low", "server: {max_header_bytes: 1023}", "server.max_header_bytes", "must be 1KiB..16MiB (got 1023)"},
		{"max_header_bytes high", "server: {max_header_bytes: 17MiB}", "server.max_header_bytes", "must be 1KiB..16MiB"},
		{"max_conns low", "server: {max_conns: 0}", "server.max_conns", "must be 1..10000000 (got 0)"},
		{"max_conns high", "server: {max_conns: 10000001}", "server.max_conns", "must be 1..10000000"},
		{"max_conns_per_ip low", "server: {max_conns_per_ip: 0}", "server.max_conns_per_ip", "must be 1..10000000 (got 0)"},
		{"min_rate high", "server: {min_rate: 2GiB/s}", "server.min_rate", "must be off or 1B/s..1GiB/s"},
		{"min_rate not a rate", "server: {min_rate: 1KiB}", "server.min_rate", "is not a byte rate"},
		{"min_rate_grace", "server: {min_rate_grace: 0s}", "server.min_rate_grace", "must be > 0"},
		{"buffer_memory low", "server: {buffer_memory: 1000KiB}", "server.buffer_memory", "must be 1MiB..1024GiB"},
		{"spill budget high", "server: {spill: {budget: 1025GiB}}", "server.spill.budget", "must be 0..1024GiB"},
		{"spill dir relative", "server: {spill: {dir: tmp/spill}}", "server.spill.dir", `must be an absolute path (got "tmp/spill")`},
		{"trusted_proxies", "server: {trusted_proxies: [10.0.0.0/8, nope]}", "server.trusted_proxies[1]", `"nope" is not an IP or CIDR`},
		{"trusted_proxies bad prefix", "server: {trusted_proxies: [1.2.3.4/33]}", "server.trusted_proxies[0]", `"1.2.3.4/33" is not an IP or CIDR`},
		// upstream
		{"max_conns_per_backend", "upstream: {max_conns_per_backend: 0}", "upstream.max_conns_per_backend", "must be 1..1000000 (got 0)"},
		{"max_idle_per_backend over max_conns", "upstream: {max_conns_per_backend: 10, max_idle_per_backend: 11}", "upstream.max_idle_per_backend", "must be 0..10 (got 11)"},
		{"max_idle_per_backend negative", "upstream: {max_idle_per_backend: -1}", "upstream.max_idle_per_backend", "must be 0..1024"},
		{"dial_timeout", "upstream: {dial_timeout: 0s}", "upstream.dial_timeout", "must be > 0"},
		{"response_header_timeout", "upstream: {response_header_timeout: 0s}", "upstream.response_header_timeout", "must be > 0"},
		{"upstream idle_timeout", "upstream: {idle_timeout: 0s}", "upstream.idle_timeout", "must be > 0"},
		// log
		{"log level", "log: {level: verbose}", "log.level", `must be debug, info, warn or error (got "verbose")`},
		{"log format", "log: {format: xml}", "log.format", `must be text or json (got "xml")`},
		{"errors_per_second", "log: {errors_per_second: 0}", "log.errors_per_second", "must be 1..100000"},
		{"errors_per_event", "log: {errors_per_event: 0}", "log.errors_per_event", "must be 1..10000"},
		{"errors_interval", "log: {errors_interval: 500ms}", "log.errors_interval", "must be 1s..1h"},
		{"access sample 0", "log: {access: {sample: 0}}", "log.access.sample", "must be > 0 and <= 1"},
		{"access sample over 1", "log: {access: {sample: 1.5}}", "log.access.sample", "must be > 0 and <= 1"},
		{"access sample negative", "log: {access: {sample: -0.1}}", "log.access.sample", "must be > 0 and <= 1"},
		{"access sample absent", "log: {access: {}}", "log.access.sample", "must be > 0 and <= 1"},
		// apps
		{"app name", "apps: {'bad name': " + okApp + "}", "apps.bad name", "app names use letters"},
		{"no hosts", `apps: {a: {backends: ["127.0.0.1:9001"]}}`, "apps.a.hosts", "at least one host is required"},
		{"empty paths", appWith("paths: []"), "apps.a.paths", "at least one path prefix is required"},
		{"host with port", "apps: {a: {hosts: [a.example.com, 'b.example.com:80'], backends: [\"127.0.0.1:9001\"]}}", "apps.a.hosts[1]", `"b.example.com:80" is not a host name`},
		{"host wildcard inside", "apps: {a: {hosts: ['a.*.com'], backends: [\"127.0.0.1:9001\"]}}", "apps.a.hosts[0]", "is not a host name"},
		{"path without slash", appWith("paths: [api]"), "apps.a.paths[0]", `"api" must start with /`},
		{"route claimed twice", "apps: {a: " + okApp + ", b: {hosts: [A.example.com], backends: [\"127.0.0.1:9002\"]}}", "apps.b", "host A.example.com path / is already claimed by app a"},
		{"no backends", "apps: {a: {hosts: [a.example.com]}}", "apps.a.backends", "at least one backend is required"},
		{"backend not host:port", "apps: {a: {hosts: [a.example.com], backends: [nope]}}", "apps.a.backends[0]", `"nope" is not host:port`},
		{"backend without host", "apps: {a: {hosts: [a.example.com], backends: [':80']}}", "apps.a.backends[0]", `":80" is not host:port`},
		{"backend port 0", "apps: {a: {hosts: [a.example.com], backends: ['127.0.0.1:0']}}", "apps.a.backends[0]", `port "0" must be 1..65535`},
		{"backend weight", "apps: {a: {hosts: [a.example.com], backends: [{addr: '127.0.0.1:1', weight: 1001}]}}", "apps.a.backends[0].weight", "must be 1..1000 (got 1001)"},
		{"backend weight 0", "apps: {a: {hosts: [a.example.com], backends: [{addr: '127.0.0.1:1', weight: 0}]}}", "apps.a.backends[0].weight", "must be 1..1000 (got 0)"},
		{"backend twice", "apps: {a: {hosts: [a.example.com], backends: ['127.0.0.1:1', {addr: '127.0.0.1:1'}]}}", "apps.a.backends[1]", "backend 127.0.0.1:1 is listed twice"},
		{"concurrency 0", appWith("limits: {concurrency: 0}"), "apps.a.limits.concurrency", "must be 1..1048576 (got 0)"},
		{"concurrency high", appWith("limits: {concurrency: 1048577}"), "apps.a.limits.concurrency", "must be 1..1048576"},
		{"max_len negative", appWith("limits: {queue: {max_len: -1}}"), "apps.a.limits.queue.max_len", "must be 0..1048576 (got -1)"},
		{"max_len high", appWith("limits: {queue: {max_len: 1048577}}"), "apps.a.limits.queue.max_len", "must be 0..1048576"},
		{"max_wait high", appWith("limits: {queue: {max_wait: 61s}}"), "apps.a.limits.queue.max_wait", "must be 0..1m0s (got 1m1s)"},
		{"max_wait negative", appWith("limits: {queue: {max_wait: -1ms}}"), "apps.a.limits.queue.max_wait", "must be 0..1m0s"},
		{"body high", appWith("limits: {body: 1100GB}"), "apps.a.limits.body", "must be 0..1TiB"},
		{"request_buffer high", appWith("limits: {request_buffer: 17MiB}"), "apps.a.limits.request_buffer", "must be 0..16MiB"},
		{"response_buffer high", appWith("limits: {response_buffer: 17MiB}"), "apps.a.limits.response_buffer", "must be 0..16MiB"},
		{"response_spill high", appWith("limits: {response_spill: 1025GiB}"), "apps.a.limits.response_spill", "must be 0..1024GiB"},
		{"top_k negative", appWith("limits: {client: {top_k: -1}}"), "apps.a.limits.client.top_k", "must be 0..1000 (got -1)"},
		{"top_k high", appWith("limits: {client: {top_k: 1001}}"), "apps.a.limits.client.top_k", "must be 0..1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := parseErrs(t, tt.src)
			wantErr(t, es, tt.path, tt.frag)
			if len(es) != 1 {
				t.Errorf("got %d errors, want 1:\n%v", len(es), es)
			}
		})
	}
}

func TestValidationAccepts(t *testing.T) {
	for _, src := range []string{
		"listen: [127.0.0.1:0, 127.0.0.1:0]\nadmin: 127.0.0.1:0", // port 0 may repeat
		"admin: {addr: 127.0.0.1:0, pprof: true}",
		"admin: {addr: 'localhost:9901'}",
		"admin: '[::1]:9901'",
		"admin: 127.1.2.3:9901",
		"listen: ':8080'",
		"listen: localhost:8080",
		`listen: "[::1]:8080"`,
		"server: {max_header_bytes: 1KiB, max_conns: 1, trusted_proxies: [10.0.0.0/8, '::1', '192.168.1.7']}",
		"server: {max_header_bytes: 16MiB, max_conns: 10000000}",
		"server: {max_conns_per_ip: 1, min_rate: 1B/s, min_rate_grace: 1ms, buffer_memory: 1MiB}",
		"server: {max_conns_per_ip: 10000000, min_rate: 1GiB/s, buffer_memory: 1024GiB}",
		"server: {min_rate: off}",
		"server: {spill: {dir: /var/tmp, budget: 0}}",
		"server: {spill: {budget: 1024GiB}}",
		appWith("limits: {response_spill: 0}"),
		appWith("limits: {response_spill: 1024GiB}"),
		appWith("limits: {request_buffer: 0, response_buffer: 0}"),
		appWith("limits: {request_buffer: 16MiB, response_buffer: 16MiB}"),
		"upstream: {max_conns_per_backend: 1, max_idle_per_backend: 0}",
		"log: {level: debug, format: json, errors_per_second: 100000, access: true}",
		"log: {access: {sample: 0.01}, errors_per_event: 10000, errors_interval: 1h}",
		"log: {access: {sample: 1}, errors_per_event: 1, errors_interval: 1s}",
		appWith("limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}, body: 0}"), // no queue
		appWith("limits: {concurrency: 1048576, queue: {max_len: 1048576, max_wait: 1m}, body: 1024GiB}"),
		appWith("paths: [/api, /static/]"),
		"apps: {a: {hosts: ['*.example.com', example.com], backends: [\"127.0.0.1:1\"]}, b: {hosts: [example.com], paths: [/b], backends: [\"127.0.0.1:2\"]}}",
		"apps: {my-app_1.v2: " + okApp + "}",
	} {
		mustParse(t, src)
	}
}

func TestConcurrencyZeroIsAnErrorButNoQueueIsValid(t *testing.T) {
	wantErr(t, parseErrs(t, appWith("limits: {concurrency: 0}")), "apps.a.limits.concurrency", "must be 1..")
	cfg := mustParse(t, appWith("limits: {queue: {max_len: 0, max_wait: 0s}}"))
	if q := cfg.Apps["a"].Limits.Queue; q.MaxLen != 0 || q.MaxWait != 0 {
		t.Errorf("queue = %+v, want max_len and max_wait zero (no queue)", q)
	}
}

func TestValidateNilApp(t *testing.T) {
	cfg := Default()
	cfg.Apps = map[string]*App{"a": nil}
	var es Errors
	if !errors.As(cfg.Validate(), &es) {
		t.Fatal("Validate accepted a nil app")
	}
	wantErr(t, es, "apps.a", "an app needs hosts and backends")
	if d := Default(); d.Validate() != nil {
		t.Errorf("Default().Validate() = %v", d.Validate())
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct{ name, src, path string }{
		{"top level", "lisen: 127.0.0.1:80", "lisen"},
		{"in server", "server: {read_timeout: 1s, readtimeout: 1s}", "server.readtimeout"},
		{"in apps", appWith("host: [b.example.com]"), "apps.a.host"},
		{"in limits", appWith("limits: {concurency: 10}"), "apps.a.limits.concurency"},
		{"in queue", appWith("limits: {queue: {max_length: 10}}"), "apps.a.limits.queue.max_length"},
		{"in backend mapping", `apps: {a: {hosts: [a.example.com], backends: [{addr: "127.0.0.1:1", wieght: 2}]}}`, "apps.a.backends[0].wieght"},
		{"in listener mapping", "listen: [{addr: 127.0.0.1:80, http2: true}]", "listen[0].http2"},
		{"in tls", "listen: [{addr: 127.0.0.1:80, tls: {cert: a, key: b, ca: c}}]", "listen[0].tls.ca"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := parseErrs(t, tt.src)
			wantErr(t, es, tt.path, "unknown key (known keys: ")
		})
	}
	// The message lists the known keys, sorted.
	es := parseErrs(t, appWith("limits: {concurency: 10}"))
	wantErr(t, es, "apps.a.limits.concurency", ", concurrency, ")
}

func TestDuplicateKeys(t *testing.T) {
	tests := []struct{ name, src, path string }{
		{"top level", "admin: 127.0.0.1:1\nadmin: 127.0.0.1:2\n", "admin"},
		{"in struct", appWith("limits: {concurrency: 1, concurrency: 2}"), "apps.a.limits.concurrency"},
		{"app name", "apps:\n  a: " + okApp + "\n  a: " + okApp + "\n", "apps.a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, parseErrs(t, tt.src), tt.path, "key appears twice")
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	src := `
listen: [nope, {addr: 127.0.0.1:80, h2: true}]
server: {read_timeout: 5, max_conns: 0}
log: {level: loud}
apps:
  photos:
    hosts: [photos.example.com]
    backends: [127.0.0.1:9001, nope]
    limits: {concurrency: 0, queue: {max_wait: 2m}, body: lots}
`
	es := parseErrs(t, src)
	want := []struct{ path, frag string }{
		{"listen[1].h2", "unknown key"},
		{"server.read_timeout", `"5" is not a duration`},
		{"listen[0].addr", `"nope" is not host:port`},
		{"server.max_conns", "must be 1.."},
		{"log.level", "must be debug"},
		{"apps.photos.backends[1]", `"nope" is not host:port`},
		{"apps.photos.limits.concurrency", "must be 1.."},
		{"apps.photos.limits.queue.max_wait", "must be 0..1m0s"},
		{"apps.photos.limits.body", `"lots" is not a size`},
	}
	for _, w := range want {
		wantErr(t, es, w.path, w.frag)
	}
	if len(es) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(es), len(want), es)
	}
	// Decode problems come first, in file order, then validation problems.
	if es[0].Path != "listen[1].h2" || es[1].Path != "server.read_timeout" || es[2].Path != "apps.photos.limits.body" {
		t.Errorf("decode errors out of order:\n%v", es)
	}
	if msg := es.Error(); !strings.HasPrefix(msg, "config: listen[1].h2: unknown key") || strings.Count(msg, "\n  ") != len(es)-1 {
		t.Errorf("Errors.Error() = %q", msg)
	}
}

func TestTypeErrors(t *testing.T) {
	tests := []struct{ name, src, path, frag string }{
		{"struct given a list", "server: [1, 2]", "server", "want a mapping, got a list"},
		{"root given a list", "[1, 2]", "", "want a mapping, got a list"},
		{"apps given a list", "apps: [a, b]", "apps", "want a mapping, got a list"},
		{"list given a scalar", appWith("paths: /"), "apps.a.paths", "want a list, got a scalar"},
		{"int given a string", "server: {max_conns: many}", "server.max_conns", `"many" is not a valid int`},
		{"int given a float", appWith("limits: {concurrency: 2.5}"), "apps.a.limits.concurrency", `"2.5" is not a valid int`},
		{"int given a quoted number", `server: {max_conns: "10"}`, "server.max_conns", `"10" is not a valid int`},
		{"int given a list", "server: {max_conns: [1]}", "server.max_conns", "want a int, got a list"},
		{"bool given a word", "log: {access: maybe}", "log.access", `"maybe" is not a valid bool`},
		{"string given a mapping", "log: {level: {a: b}}", "log.level", "want a string, got a mapping"},
		{"admin given a list", "admin: [127.0.0.1:1]", "admin", "want a mapping, got a list"},
		{"duration without unit", "server: {idle_timeout: 30}", "server.idle_timeout", `"30" is not a duration`},
		{"duration given a list", "server: {idle_timeout: [30s]}", "server.idle_timeout", "want a duration like 50ms, got a list"},
		{"size given a mapping", appWith("limits: {body: {mb: 10}}"), "apps.a.limits.body", "want a size like 10MB, got a mapping"},
		{"listen given a mapping", "listen: {addr: 127.0.0.1:80}", "listen", "want an address or a list of listeners, got a mapping"},
		{"listener given a list", "listen: [[127.0.0.1:80]]", "listen[0]", "want a mapping, got a list"},
		{"backend given a list", "apps: {a: {hosts: [a.example.com], backends: [[x]]}}", "apps.a.backends[0]", "want a mapping, got a list"},
		{"empty list item", "apps: {a: {hosts: [a.example.com, ~], backends: [\"127.0.0.1:1\"]}}", "apps.a.hosts[1]", "empty list item"},
		{"empty listener", "listen: [127.0.0.1:80, ~]", "listen[1]", "empty list item"},
		{"merge key", "apps:\n  a:\n    <<: {hosts: [a.example.com]}\n    backends: [\"127.0.0.1:1\"]\n", "apps.a.<<", "merge keys are not supported"},
		{"second document", "admin: 127.0.0.1:1\n---\nadmin: 127.0.0.1:2\n", "", "line 3: a config file holds one YAML document"},
		{"syntax", "apps: [\n", "", "line "},
		{"tabs", "server:\n\tmax_conns: 1\n", "", "found character that cannot start any token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := parseErrs(t, tt.src)
			wantErr(t, es, tt.path, tt.frag)
			// A value that failed to decode is not reported again by validation.
			if len(es) != 1 && tt.name != "merge key" {
				t.Errorf("got %d errors, want 1:\n%v", len(es), es)
			}
		})
	}
}

func TestNullKeepsDefault(t *testing.T) {
	cfg := mustParse(t, "admin:\nserver: {max_conns: ~, idle_timeout: null}\nlog:\n"+
		"apps: {a: {hosts: [a.example.com], backends: [\"127.0.0.1:1\"], paths: ~, limits: {concurrency: ~, queue: ~, body: }}}")
	d := Default()
	if cfg.Admin != d.Admin || !reflect.DeepEqual(cfg.Server, d.Server) || cfg.Log != d.Log {
		t.Errorf("null values did not keep the defaults: %+v", cfg)
	}
	if a := cfg.Apps["a"]; !reflect.DeepEqual(a.Limits, DefaultApp().Limits) || !reflect.DeepEqual(a.Paths, []string{"/"}) {
		t.Errorf("null values in an app did not keep the defaults: %+v", a)
	}
	// A null app is an app with nothing set.
	es := parseErrs(t, "apps:\n  a:\n")
	wantErr(t, es, "apps.a.hosts", "at least one host")
	wantErr(t, es, "apps.a.backends", "at least one backend")
}

func TestParseAliases(t *testing.T) {
	src := `
apps:
  a:
    hosts: [a.example.com]
    backends: &backends ["127.0.0.1:1", {addr: "127.0.0.1:2", weight: 2}]
    limits: &limits {concurrency: 8, queue: {max_len: 4, max_wait: 1s}}
  b:
    hosts: [b.example.com]
    backends: *backends
    limits: *limits
listen: [&l 127.0.0.1:8080, {addr: "127.0.0.1:8081"}]
admin: 127.0.0.1:9901
`
	cfg := mustParse(t, src)
	if !reflect.DeepEqual(cfg.Apps["a"].Backends, cfg.Apps["b"].Backends) || cfg.Apps["b"].Limits.Concurrency.Limit != 8 {
		t.Errorf("aliases not followed: a=%+v b=%+v", cfg.Apps["a"], cfg.Apps["b"])
	}
	// An alias as a list item of the listen shorthand.
	cfg = mustParse(t, "apps: {a: {hosts: [a.example.com], backends: [&addr \"127.0.0.1:8080\"]}}\nlisten: [*addr]\n")
	if want := (Listeners{{Addr: "127.0.0.1:8080"}}); !reflect.DeepEqual(cfg.Listen, want) {
		t.Errorf("Listen = %+v, want %+v", cfg.Listen, want)
	}
}

func TestH2CWithTLSIsAnError(t *testing.T) {
	cert, key := writeCert(t)
	es := parseErrs(t, "listen: [{addr: 127.0.0.1:443, h2c: true, tls: {cert: "+cert+", key: "+key+"}}]")
	wantErr(t, es, "listen[0].h2c", "h2c is for listeners without tls")
	if len(es) != 1 {
		t.Errorf("got %d errors, want 1:\n%v", len(es), es)
	}
}

// listen[].engine is gone (the engine is chosen per connection): a config
// that still names it, whatever the value, is refused with the reason,
// never served with a silent change of engine.
func TestListenEngineIsRefused(t *testing.T) {
	for _, v := range []string{"fasthttp", "nethttp", "netty"} {
		y := "listen: [{addr: 127.0.0.1:80, engine: " + v + "}, 127.0.0.1:81]"
		es := parseErrs(t, y)
		wantErr(t, es, "listen[0].engine", "picks the engine per connection")
		if len(es) != 1 {
			t.Errorf("%s: got %d errors, want 1:\n%v", y, len(es), es)
		}
	}
}

func TestTrustedPrefixes(t *testing.T) {
	cfg := mustParse(t, "server: {trusted_proxies: [10.1.2.3/8, '::ffff:192.0.2.1', 2001:db8::/32]}")
	var got []string
	for _, p := range cfg.Server.TrustedPrefixes() {
		got = append(got, p.String())
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TrustedPrefixes() = %v, want %v", got, want)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load("/nonexistent/levee.yaml"); err == nil || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("Load(missing) = %v, want a config: error", err)
	}
}

func TestRouteClashReportedOncePerApp(t *testing.T) {
	src := `
apps:
  a: {hosts: [x.example.com, y.example.com], paths: [/, /api], backends: ["127.0.0.1:1"]}
  b: {hosts: [X.example.com, y.example.com], paths: [/, /api, /b], backends: ["127.0.0.1:2"]}
  c: {hosts: [y.example.com, z.example.com], paths: [/b], backends: ["127.0.0.1:3"]}
`
	es := parseErrs(t, src)
	wantErr(t, es, "apps.b", "host X.example.com path / is already claimed by app a (and 3 more host and path pairs)")
	// b's own new routes (/b) are b's: c clashes with b, the first claimant.
	wantErr(t, es, "apps.c", "host y.example.com path /b is already claimed by app b")
	if len(es) != 2 {
		t.Errorf("got %d errors, want 2:\n%v", len(es), es)
	}
}
