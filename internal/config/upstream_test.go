package config

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/testcert"
)

// appA is an app's config up to its upstream's value.
const appA = "apps:\n  a:\n    hosts: [a.test]\n    backends: ['127.0.0.1:9']\n    upstream: "

// An app's backends default to HTTP/1.1; h2 with tls files loads the CA
// and the client certificate, and verifies unless told not to.
func TestAppUpstreamTLSLoads(t *testing.T) {
	cfg, err := Parse([]byte(appA + "{}"))
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Apps["a"].Upstreams(); u.Protocol != ProtocolHTTP1 || u.HTTP2() || u.Deadline != nil || u.Deadlines().Timeout.D() != DefaultAppTimeout {
		t.Fatalf("defaults: %+v", u)
	}
	if c := (*UpstreamTLS)(nil).Config("b.test"); c.ServerName != "b.test" || c.InsecureSkipVerify || c.NextProtos[0] != "h2" {
		t.Fatalf("nil tls: %+v", c)
	}
	certFile, keyFile := testcert.Files(t, "client.test")
	src := fmt.Sprintf("{protocol: h2, tls: {ca: %s, cert: %s, key: %s, server_name: api.test}}", certFile, certFile, keyFile)
	cfg, err = Parse([]byte(appA + src))
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Apps["a"].Upstreams()
	c := u.TLS.Config("127.0.0.1")
	if !u.HTTP2() || c.ServerName != "api.test" || c.RootCAs == nil || len(c.Certificates) != 1 || c.InsecureSkipVerify ||
		c.MinVersion < tls.VersionTLS12 {
		t.Fatalf("tls config %+v", c)
	}
}

// A stored app cannot name files for its backends' TLS.
func TestStoredAppUpstreamNamesNoFiles(t *testing.T) {
	_, err := ParseApp("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:9"],"upstream":{"protocol":"h2","tls":{"ca":"/etc/ca.pem"}}}`))
	if err == nil || !strings.Contains(err.Error(), "apps.a.upstream.tls: a stored app names no files") {
		t.Fatalf("err = %v", err)
	}
	if _, err := ParseApp("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:9"],"upstream":{"protocol":"h2","tls":{"server_name":"x"}}}`)); err != nil {
		t.Fatal(err)
	}
}

// Sum follows the TLS files' contents, not their names: the same files
// give the same Sum, a rotated certificate under the same name another.
func TestAppUpstreamTLSSumFollowsTheContents(t *testing.T) {
	certFile, keyFile := testcert.Files(t, "client.test")
	src := fmt.Sprintf("{protocol: h2, tls: {ca: %s, cert: %s, key: %s}}", certFile, certFile, keyFile)
	sum := func() [32]byte {
		t.Helper()
		cfg, err := Parse([]byte(appA + src))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Apps["a"].Upstreams().TLS.Sum()
	}
	first := sum()
	if again := sum(); again != first || first == ([32]byte{}) {
		t.Fatalf("the same files: sums %x and %x", first, again)
	}
	cert, key := testcert.PEM(t, "client.test")
	for _, f := range []struct {
		path string
		b    []byte
	}{{certFile, cert}, {keyFile, key}} {
		if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if rotated := sum(); rotated == first {
		t.Fatalf("a rotated certificate kept the sum %x", first)
	}
}
