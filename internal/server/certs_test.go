package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/testcert"
)

// servedName dials addr over TLS with SNI name (none when empty) and
// returns the leaf certificate's first DNS name, or the handshake's error.
func servedName(t *testing.T, addr, name string) (string, error) {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{ServerName: name, InsecureSkipVerify: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].DNSNames[0], nil
}

// TestSNIPicksTheAppsCertificate: a TLS listener serves an app's own
// certificate for its hosts (exact and wildcard), from the config file
// and from the catalog, and its own for every other name; a stored
// certificate that does not load fails only its host's handshakes, counted.
func TestSNIPicksTheAppsCertificate(t *testing.T) {
	if testH2C() {
		t.Skip("TLS listeners; the same on every protocol")
	}
	listenCert, listenKey := testcert.Files(t, "default.test")
	aCert, aKey := testcert.Files(t, "a.test")
	wCert, wKey := testcert.Files(t, "*.w.test")
	sCert, sKey := testcert.PEM(t, "s.test")
	tlsJSON, _ := json.Marshal(map[string]string{"cert_pem": string(sCert), "key_pem": string(sKey)})
	writer, reader := catalogFile(t, storedApp("s", "s.test", "127.0.0.1:9", `,"tls":`+string(tlsJSON)))
	// A certificate that got into the catalog without the import's check.
	bad, _ := json.Marshal(map[string]any{"hosts": []string{"bad.test"}, "backends": []string{"127.0.0.1:9"},
		"tls": map[string]string{"cert_pem": "garbage", "key_pem": string(sKey)}})
	badApp, err := config.ParseApp("bad", bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Put(context.Background(), []config.AppSource{{Name: "bad", Config: bad, App: badApp}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	p := startCatalogProxy(t, fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a: {hosts: [a.test], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}
  b: {hosts: [b.test], backends: ['127.0.0.1:9']}
  w: {hosts: ['*.w.test'], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}
`, listenCert, listenKey, aCert, aKey, wCert, wKey), reader)
	addr := p.srv.Addrs()[0].String()
	for sni, want := range map[string]string{
		"a.test": "a.test", "A.TEST.": "a.test", "x.w.test": "*.w.test", "b.test": "default.test",
		"s.test": "s.test", "nobody.test": "default.test", "": "default.test",
	} {
		got, err := servedName(t, addr, sni)
		if err != nil || got != want {
			t.Errorf("SNI %q: served %q, %v; want %q", sni, got, err, want)
		}
	}
	if _, err := servedName(t, addr, "bad.test"); err == nil {
		t.Error("SNI bad.test: the handshake succeeded with a certificate that does not load")
	}
	if n := p.metric("levee_tls_certificate_errors_total", map[string]string{"app": "bad"}); n != 1 {
		t.Errorf("levee_tls_certificate_errors_total{app=bad} = %v; want 1", n)
	}
	// The others are untouched.
	if got, err := servedName(t, addr, "s.test"); err != nil || got != "s.test" {
		t.Errorf("after bad.test: s.test served %q, %v", got, err)
	}
}

// TestColdHandshakesWaitOnTheLoaderOnly: handshakes for cold stored hosts
// load their certificates through the catalog's bounded loader, so while
// it is held by a slow store, a hot stored host (cached) and a config
// host still handshake at once with their own certificates, and a cold
// host beyond the loader's bound gets the listener's certificate, counted.
func TestColdHandshakesWaitOnTheLoaderOnly(t *testing.T) {
	if testH2C() {
		t.Skip("TLS listeners; the same on every protocol")
	}
	listenCert, listenKey := testcert.Files(t, "default.test")
	aCert, aKey := testcert.Files(t, "a.test")
	var jsonl string
	for _, h := range []string{"hot", "cold1", "cold2"} {
		c, k := testcert.PEM(t, h+".test")
		tj, _ := json.Marshal(map[string]string{"cert_pem": string(c), "key_pem": string(k)})
		jsonl += storedApp(h, h+".test", "127.0.0.1:9", `,"tls":`+string(tj))
	}
	_, st := catalogFile(t, jsonl)
	g := &gatedStore{Store: st, gate: make(chan struct{}), started: make(chan string, 4)}
	p := startCatalogProxy(t, fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
catalog: {sqlite: unused-in-test.db, loader: {concurrency: 1, max_waiters: 0}}
apps:
  a: {hosts: [a.test], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}
`, listenCert, listenKey, aCert, aKey), g)
	addr := p.srv.Addrs()[0].String()
	g.pass.Store(true)
	if got, err := servedName(t, addr, "hot.test"); err != nil || got != "hot.test" { // loaded and cached
		t.Fatalf("hot.test: %q, %v", got, err)
	}
	g.pass.Store(false)

	cold1 := make(chan string, 1)
	go func() {
		got, err := servedName(t, addr, "cold1.test")
		if err != nil {
			got = err.Error()
		}
		cold1 <- got
	}()
	<-g.started // cold1's load holds the only loader slot
	q := g.queries.Load()
	for sni, want := range map[string]string{"hot.test": "hot.test", "a.test": "a.test", "cold2.test": "default.test"} {
		if got, err := servedName(t, addr, sni); err != nil || got != want {
			t.Errorf("%s while the loader is held: %q, %v; want %q", sni, got, err, want)
		}
	}
	if g.queries.Load() != q {
		t.Error("a cached, config or refused handshake queried the store")
	}
	if n := p.metric("levee_tls_sni_fallback_total", map[string]string{"reason": "catalog-busy"}); n != 1 {
		t.Errorf("levee_tls_sni_fallback_total{reason=catalog-busy} = %v; want 1", n)
	}
	close(g.gate)
	if got := <-cold1; got != "cold1.test" {
		t.Errorf("cold1.test once the store answered: %q", got)
	}
}

// TestReloadServesRenewedCertificates: certificates renewed in place (the
// same file names, new contents, as certbot or a cron job writes them)
// are served from the next reload on, the listener's own as an app's; a
// reload is how a renewal takes effect without a restart.
func TestReloadServesRenewedCertificates(t *testing.T) {
	if testH2C() {
		t.Skip("TLS listeners; the same on every protocol")
	}
	listenCert, listenKey := testcert.Files(t, "old-listener.test")
	aCert, aKey := testcert.Files(t, "a.test")
	cfg := fmt.Sprintf(`
listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]
apps:
  a: {hosts: [a.test, '*.a.test'], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}
`, listenCert, listenKey, aCert, aKey)
	p := startProxy(t, cfg)
	addr := p.srv.Addrs()[0].String()
	if got, err := servedName(t, addr, "other.test"); err != nil || got != "old-listener.test" {
		t.Fatalf("before the renewal: served %q, %v", got, err)
	}
	for _, f := range []struct{ cert, key, name string }{
		{listenCert, listenKey, "new-listener.test"}, {aCert, aKey, "*.a.test"},
	} {
		c, k := testcert.PEM(t, f.name)
		writeFile(t, f.cert, c)
		writeFile(t, f.key, k)
	}
	if err := p.srv.Reload(mustParse(t, cfg)); err != nil {
		t.Fatal(err)
	}
	for sni, want := range map[string]string{"other.test": "new-listener.test", "": "new-listener.test", "a.test": "*.a.test"} {
		if got, err := servedName(t, addr, sni); err != nil || got != want {
			t.Errorf("after the renewal and a reload, SNI %q: served %q, %v; want %q", sni, got, err, want)
		}
	}
}
