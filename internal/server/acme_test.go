package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/pebbletest"
	"github.com/leveeproxy/levee/internal/testcert"
	"github.com/leveeproxy/levee/internal/testlog"
)

// acmeProxy is levee with tls.acme on Pebble, on a plain listener and a
// TLS one bound before the config is written (Pebble must know their
// ports, and levee Pebble's directory).
type acmeProxy struct {
	*proxy
	pebble    *pebbletest.Pebble
	tlsAddr   string
	plainAddr string
}

func startACMEProxy(t *testing.T, challenge, jsonl string) *acmeProxy {
	t.Helper()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]net.Listener{plain.Addr().String(): plain, tlsLn.Addr().String(): tlsLn}
	pb := pebbletest.Start(t, pebbletest.Options{HTTP: plain.Addr().(*net.TCPAddr).Port, TLS: tlsLn.Addr().(*net.TCPAddr).Port})
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "acme.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "catalog.db")
	_, reader := catalogFileAt(t, db, jsonl)
	cert, key := testcert.Files(t, "default.test")
	// first_wait: a bound for the test's failure, not a measure.
	cfg := mustParse(t, fmt.Sprintf(`
listen: [{addr: %s}, {addr: %s, tls: {cert: %s, key: %s}}]
catalog: {sqlite: %s}
tls:
  acme: {ca: %q, ca_root: %s, key_file: %s, challenges: [%s], first_wait: 1m}
apps:
  shop: {hosts: [shop.example.com], backends: ['127.0.0.1:9'], tls: acme}
  plain: {hosts: [plain.example.com], backends: ['127.0.0.1:9']}
`, plain.Addr(), tlsLn.Addr(), cert, key, db, pb.Directory, pb.RootsFile, keyFile, challenge))
	st, err := acme.OpenStorage(context.Background(), acme.StorageOptions{SQLite: db, Key: cfg.TLS.ACME.Key()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := &proxy{t: t, logs: &testlog.Buffer{}, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(p.logs, nil))
	mgr := acme.New(acme.Options{Config: cfg, Storage: st, Logger: log})
	p.srv = New(cfg, Options{Logger: log, Catalog: reader, ACME: mgr,
		Listen: func(_, addr string) (net.Listener, error) { return bound[addr], nil }})
	if err := p.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(p.srv.ACMEListeners()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { p.done <- p.srv.Serve(ctx) }()
	t.Cleanup(func() {
		p.Stop()
		mgr.Close()
	})
	p.URL = "http://" + plain.Addr().String()
	return &acmeProxy{proxy: p, pebble: pb, tlsAddr: tlsLn.Addr().String(), plainAddr: plain.Addr().String()}
}

// verified handshakes for name and verifies the chain presented against
// Pebble's root.
func (a *acmeProxy) verified(t *testing.T, name string) (*x509.Certificate, error) {
	t.Helper()
	c, err := tls.Dial("tcp", a.tlsAddr, &tls.Config{ServerName: name, RootCAs: a.pebble.Root(t)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// TestACMEIssuesThroughTheListeners: a config app and a catalog app get
// certificates from Pebble by each challenge, answered on levee's own
// listeners before routing (no app sees a validation); the handshakes
// then present them, verified against Pebble's root; names no app
// claims with tls: acme cause no order.
func TestACMEIssuesThroughTheListeners(t *testing.T) {
	if testH2C() {
		t.Skip("TLS and plain listeners of its own; the same on every protocol")
	}
	for _, ch := range []string{"tls-alpn-01", "http-01"} {
		t.Run(ch, func(t *testing.T) {
			a := startACMEProxy(t, ch, storedApp("blog", "blog.example.org", "127.0.0.1:9", `,"tls":"acme"`)+
				storedApp("other", "other.example.org", "127.0.0.1:9", ""))
			for _, name := range []string{"evil.example.com", "plain.example.com", "other.example.org"} {
				if got, err := servedName(t, a.tlsAddr, name); err != nil || got != "default.test" {
					t.Fatalf("%s: served %q, %v; want the listener's", name, got, err)
				}
			}
			if n := a.pebble.Orders(); n != 0 {
				t.Fatalf("names without tls: acme caused %d orders", n)
			}
			// Only the name no app claims is an unknown one.
			if n := a.metric("levee_acme_refused_total", map[string]string{"reason": "unknown"}); n != 1 {
				t.Errorf("levee_acme_refused_total{reason=unknown} = %v, want 1", n)
			}
			for _, name := range []string{"shop.example.com", "blog.example.org"} {
				leaf, err := a.verified(t, name)
				if err != nil {
					t.Fatalf("%s: %v\n%s", name, err, a.logs.String())
				}
				if leaf.DNSNames[0] != name {
					t.Fatalf("%s: got a certificate for %v", name, leaf.DNSNames)
				}
			}
			if n := a.pebble.Orders(); n != 2 {
				t.Fatalf("Pebble counted %d orders, want 2", n)
			}
			// No validation reached an app, nor its limits.
			for _, app := range []string{"shop", "blog"} {
				if n := a.metricSum("levee_requests_total", map[string]string{"app": app}); n != 0 {
					t.Errorf("app %s counted %v requests", app, n)
				}
			}
			if n := a.metric("levee_acme_certificates_total", map[string]string{"result": "issued"}); n != 2 {
				t.Errorf("levee_acme_certificates_total{result=issued} = %v", n)
			}
		})
	}
}

// An HTTP-01 path for a name without a validation under way is routed
// as any request (the app answers, here 502: no backend), and one for a
// name no app claims gets 404: levee answers no token it did not set.
func TestACMEHTTPChallengeOnlyForItsTokens(t *testing.T) {
	if testH2C() {
		t.Skip("plain HTTP/1.1 validation requests")
	}
	a := startACMEProxy(t, "http-01", storedApp("other", "other.example.org", "127.0.0.1:9", ""))
	for host, want := range map[string]int{"shop.example.com": http.StatusBadGateway, "nobody.example.com": http.StatusNotFound} {
		req, _ := http.NewRequest("GET", "http://"+a.plainAddr+acme.HTTPChallengePrefix+"made-up-token", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	if n := a.pebble.Orders(); n != 0 {
		t.Fatalf("%d orders", n)
	}
}
