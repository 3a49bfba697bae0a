package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/testcert"
)

func appTLSConfig(tls string) string {
	return "apps:\n  a:\n    hosts: [a.test]\n    backends: ['127.0.0.1:9']\n    tls: " + tls + "\n"
}

func TestAppTLSInTheConfigFile(t *testing.T) {
	certFile, keyFile := testcert.Files(t, "a.test")
	cfg, err := Parse([]byte(appTLSConfig(fmt.Sprintf("{cert: %s, key: %s}", certFile, keyFile))))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cfg.Apps["a"].TLS.Certificate(); err != nil || c == nil || c.Leaf == nil || c.Leaf.DNSNames[0] != "a.test" {
		t.Fatalf("certificate %v, %v; want a.test's", c, err)
	}
	cert, key := testcert.PEM(t, "a.test")
	inline := fmt.Sprintf("{cert_pem: %s, key_pem: %s}", strconv.Quote(string(cert)), strconv.Quote(string(key)))
	if cfg, err := Parse([]byte(appTLSConfig(inline))); err != nil {
		t.Fatal(err)
	} else if c, _ := cfg.Apps["a"].TLS.Certificate(); c == nil {
		t.Fatal("an inline PEM certificate was not loaded")
	}

	bad := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ tls, want string }{
		"a bad certificate":     {fmt.Sprintf("{cert: %s, key: %s}", bad, keyFile), "apps.a.tls: cannot load certificate"},
		"a missing key file":    {fmt.Sprintf("{cert: %s, key: /nonexistent/key.pem}", certFile), "apps.a.tls.key:"},
		"only a cert":           {fmt.Sprintf("{cert: %s}", certFile), "apps.a.tls: both cert and key are required"},
		"files and PEM":         {fmt.Sprintf("{cert: %s, key: %s, cert_pem: x}", certFile, keyFile), "either cert and key (files) or cert_pem and key_pem"},
		"an empty mapping":      {"{}", "apps.a.tls: both cert_pem and key_pem are required"},
		"a key of another cert": {fmt.Sprintf("{cert_pem: %s, key_pem: %s}", strconv.Quote(string(cert)), strconv.Quote(string(mustKey(t)))), "apps.a.tls: cannot load certificate"},
	} {
		if _, err := Parse([]byte(appTLSConfig(tc.tls))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, tc.want)
		}
	}
}

func mustKey(t *testing.T) []byte {
	_, key := testcert.PEM(t, "other.test")
	return key
}

// A stored app holds PEM; one that does not load fails only its hosts'
// handshakes, so ParseApp (the server's) keeps the app and the error,
// while the import refuses it.
func TestAppTLSStored(t *testing.T) {
	cert, key := testcert.PEM(t, "a.test")
	good, _ := json.Marshal(map[string]any{"hosts": []string{"a.test"}, "backends": []string{"127.0.0.1:9"},
		"tls": map[string]string{"cert_pem": string(cert), "key_pem": string(key)}})
	a, err := ParseApp("a", good)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.TLS.Certificate(); c == nil || err != nil {
		t.Fatalf("stored certificate %v, %v", c, err)
	}
	broken, _ := json.Marshal(map[string]any{"hosts": []string{"a.test"}, "backends": []string{"127.0.0.1:9"},
		"tls": map[string]string{"cert_pem": "garbage", "key_pem": string(key)}})
	a, err = ParseApp("a", broken)
	if err != nil {
		t.Fatalf("a stored app with a bad certificate: %v; want the app, with the error kept", err)
	}
	if c, err := a.TLS.Certificate(); c != nil || err == nil {
		t.Fatalf("bad stored certificate: %v, %v; want an error", c, err)
	}
	if _, err := ParseAppJSON(append([]byte(`{"name":"a",`), broken[1:]...), 1); err == nil ||
		!strings.Contains(err.Error(), "apps.a.tls: cannot load certificate") {
		t.Fatalf("import of a bad certificate: %v; want it refused", err)
	}
	files, _ := json.Marshal(map[string]any{"hosts": []string{"a.test"}, "backends": []string{"127.0.0.1:9"},
		"tls": map[string]string{"cert": "/etc/cert.pem", "key": "/etc/key.pem"}})
	if _, err := ParseApp("a", files); err == nil || !strings.Contains(err.Error(), "holds its certificate as cert_pem") {
		t.Fatalf("a stored app naming files: %v; want it refused", err)
	}
}

// The import reads an app's certificate files into cert_pem and key_pem,
// from YAML and from JSONL alike.
func TestAppTLSImportReadsTheFiles(t *testing.T) {
	certFile, keyFile := testcert.Files(t, "a.test")
	want, _ := os.ReadFile(certFile)
	check := func(src AppSource) {
		t.Helper()
		var stored struct {
			TLS map[string]string `json:"tls"`
		}
		if err := json.Unmarshal(src.Config, &stored); err != nil {
			t.Fatal(err)
		}
		if stored.TLS["cert_pem"] != string(want) || stored.TLS["key_pem"] == "" || stored.TLS["cert"] != "" {
			t.Fatalf("stored tls: %v; want the PEM, not the paths", stored.TLS)
		}
		if c, err := src.App.TLS.Certificate(); c == nil || err != nil {
			t.Fatalf("imported certificate: %v, %v", c, err)
		}
	}
	srcs, err := ParseAppsYAML([]byte(appTLSConfig(fmt.Sprintf("{cert: %s, key: %s}", certFile, keyFile))))
	if err != nil {
		t.Fatal(err)
	}
	check(srcs[0])
	line := fmt.Sprintf(`{"name": "a", "hosts": ["a.test"], "backends": ["127.0.0.1:9"], "tls": {"cert": %q, "key": %q}}`, certFile, keyFile)
	src, err := ParseAppJSON([]byte(line), 1)
	if err != nil {
		t.Fatal(err)
	}
	check(src)
	if _, err := ParseAppsYAML([]byte(appTLSConfig("{cert: /nonexistent.pem, key: /nonexistent.key}"))); err == nil ||
		!strings.Contains(err.Error(), "apps.a.tls.cert") {
		t.Fatalf("import naming a missing file: %v", err)
	}
}
