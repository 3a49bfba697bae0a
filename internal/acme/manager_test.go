package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/pebbletest"
	"github.com/leveeproxy/levee/internal/testcert"
)

// fixture is a Manager behind two listeners of its own, as levee's
// would be: a TLS one (TLS-ALPN-01) and a plain one (HTTP-01).
type fixture struct {
	m        *Manager
	reg      *prometheus.Registry
	pebble   *pebbletest.Pebble
	tlsAddr  string
	fallback *x509.Certificate // the listener's own
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

func newFixture(t *testing.T, challenge, apps string) *fixture {
	return newFixtureWith(t, challenge, apps, 0, 0)
}

// silent, as a validity, makes a fixture whose plain listener answers no
// HTTP-01 validation (with 90-day certificates).
const silent = -1

// newFixtureWith is newFixture with Pebble's certificates living validity
// (0: 90 days) and renewals looked for every renewCheck (0: the default).
func newFixtureWith(t *testing.T, challenge, apps string, validity, renewCheck time.Duration) *fixture {
	answer := validity != silent
	validity = max(validity, 0)
	tlsLn, httpLn := listen(t), listen(t)
	p := pebbletest.Start(t, pebbletest.Options{HTTP: port(httpLn), TLS: port(tlsLn), Validity: validity})
	dir := t.TempDir()
	cfg := testConfig(t, p, "sqlite: "+filepath.Join(dir, "c.db"), challenge, apps)
	st, err := OpenStorage(context.Background(), StorageOptions{SQLite: cfg.Catalog.SQLite, Key: cfg.TLS.ACME.Key()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := serveManager(t, cfg, st, tlsLn, httpLn, renewCheck, answer)
	f.pebble = p
	return f
}

// testConfig is a validated config with tls.acme on Pebble p, the
// catalog store given (a flow mapping's content), and apps.
func testConfig(t *testing.T, p *pebbletest.Pebble, catalog, challenge, apps string) *config.Config {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "acme.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(testKey(7))), 0o600); err != nil {
		t.Fatal(err)
	}
	// first_wait: a bound for the test's failure, not a measure.
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
catalog: {%s}
tls:
  acme: {ca: %q, ca_root: %s, key_file: %s, challenges: [%s], first_wait: 1m}
apps:
%s`, catalog, p.Directory, p.RootsFile, keyFile, challenge, apps)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serveManager starts a Manager on st behind a TLS and a plain listener
// of its own, as levee's would be, until t ends.
func serveManager(t *testing.T, cfg *config.Config, st *Storage, tlsLn, httpLn net.Listener, renewCheck time.Duration, answer bool) *fixture {
	t.Helper()
	return serveManagerWith(t, cfg, st, tlsLn, httpLn, Options{RenewCheck: renewCheck}, answer)
}

// serveManagerWith is serveManager with more of the Manager's options
// (Config, Storage and Logger are set here).
func serveManagerWith(t *testing.T, cfg *config.Config, st *Storage, tlsLn, httpLn net.Listener, o Options, answer bool) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Config, o.Storage = cfg, st
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := New(o)
	reg.MustRegister(m.Collectors()...)
	if err := m.Start(Listeners{HTTP: httpLn.Addr().String(), TLS: tlsLn.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := testcert.PEM(t, "listener.invalid")
	own, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tcfg := &tls.Config{Certificates: []tls.Certificate{own}, NextProtos: []string{"http/1.1", "acme-tls/1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _, err := m.Certificate(h)
			return c, err
		}}
	tlsSrv := &http.Server{Handler: http.NotFoundHandler(), TLSConfig: tcfg}
	httpSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer || !m.ServeHTTPChallenge(w, r) {
			http.NotFound(w, r)
		}
	})}
	go tlsSrv.ServeTLS(tlsLn, "", "")
	go httpSrv.Serve(httpLn)
	t.Cleanup(func() {
		tlsSrv.Close()
		httpSrv.Close()
		m.Close()
	})
	leaf, _ := x509.ParseCertificate(own.Certificate[0])
	return &fixture{m: m, reg: reg, tlsAddr: tlsLn.Addr().String(), fallback: leaf}
}

// handshake connects for name and returns the certificate presented.
func (f *fixture) handshake(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", f.tlsAddr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("handshake for %s: %v", name, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

const shopApp = `
  shop: {hosts: [shop.example.com], backends: ["127.0.0.1:9"], tls: acme}
`

// A config app's name gets a certificate from Pebble by each challenge,
// verified against Pebble's root; an unknown name causes no order.
func TestManagerObtainsFromPebble(t *testing.T) {
	for _, ch := range []string{config.ChallengeTLSALPN, config.ChallengeHTTP} {
		t.Run(ch, func(t *testing.T) {
			// certmagic keeps one rate limiter goroutine per ACME account in a
			// package-level map for the process's life: one per account, not
			// per name, and not stoppable from outside.
			leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
			f := newFixture(t, ch, shopApp)
			for _, evil := range []string{"evil.example.com", "a.shop.example.com", "127.0.0.1"} {
				if got := f.handshake(t, evil); !got.Equal(f.fallback) {
					t.Fatalf("%s got %v, want the listener's certificate", evil, got.Subject)
				}
			}
			if n := f.pebble.Orders(); n != 0 {
				t.Fatalf("unknown names caused %d orders", n)
			}
			if got := testutil.ToFloat64(f.m.m.refused.WithLabelValues(ReasonUnknown)); got != 2 {
				t.Fatalf("refused unknown = %v, want 2 (the IP is not a name)", got)
			}
			leaf := f.handshake(t, "shop.example.com")
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "shop.example.com", Roots: f.pebble.Root(t),
				Intermediates: f.intermediates(t)}); err != nil {
				t.Fatalf("the certificate does not verify against Pebble's root: %v (subject %v)", err, leaf.Subject)
			}
			again := f.handshake(t, "shop.example.com")
			if !again.Equal(leaf) {
				t.Fatal("the second handshake got another certificate")
			}
			if n := f.pebble.Orders(); n != 1 {
				t.Fatalf("Pebble counted %d orders, want 1", n)
			}
			if got := testutil.ToFloat64(f.m.m.certs.WithLabelValues("issued")); got != 1 {
				t.Fatalf("issued = %v", got)
			}
			list, err := Certs(context.Background(), f.m.o.Storage, 0)
			if err != nil || len(list) != 1 || list[0].Name != "shop.example.com" || !list[0].NotAfter.Equal(leaf.NotAfter) ||
				!strings.HasPrefix(list[0].Issuer, "Pebble Intermediate") {
				t.Fatalf("Certs = %+v, %v", list, err)
			}
			life := leaf.NotAfter.Sub(leaf.NotBefore)
			if r := list[0].NextRenewal; r.Before(leaf.NotBefore.Add(life*7/12)) || !r.Before(leaf.NotBefore.Add(life*2/3)) {
				t.Fatalf("next renewal %s, want within [7/12, 2/3) of the life from %s", r, leaf.NotBefore)
			}
			if days := f.m.nearestExpiry(); days < 89 || days > 90 {
				t.Fatalf("nearest expiry %v days, want Pebble's 90", days)
			}
		})
	}
}

// intermediates fetches the chain the handshake sent, beyond the leaf.
func (f *fixture) intermediates(t *testing.T) *x509.CertPool {
	c, err := tls.Dial("tcp", f.tlsAddr, &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := x509.NewCertPool()
	for _, ic := range c.ConnectionState().PeerCertificates[1:] {
		pool.AddCert(ic)
	}
	return pool
}

// Renewal replaces a certificate before it expires, in the background,
// with no failed handshake during the swap: Pebble issues 30-second
// certificates, renewed from 7/12 of their life, and a client keeps
// handshaking (verifying each against Pebble's root) until it sees the
// new one.
func TestManagerRenewsWithoutAFailedHandshake(t *testing.T) {
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	f := newFixtureWith(t, config.ChallengeTLSALPN, shopApp, 30*time.Second, 100*time.Millisecond)
	roots := f.pebble.Root(t)
	first := f.handshake(t, "shop.example.com")
	if !first.Equal(first) || first.DNSNames[0] != "shop.example.com" {
		t.Fatalf("first certificate: %v", first.DNSNames)
	}
	deadline := first.NotAfter // a bound for the failure, not a measure
	for {
		c, err := tls.Dial("tcp", f.tlsAddr, &tls.Config{ServerName: "shop.example.com", RootCAs: roots})
		if err != nil {
			t.Fatalf("a handshake failed during renewal: %v", err)
		}
		leaf := c.ConnectionState().PeerCertificates[0]
		c.Close()
		if !leaf.Equal(first) {
			if !leaf.NotAfter.After(first.NotAfter) {
				t.Fatalf("the new certificate expires at %s, the old at %s", leaf.NotAfter, first.NotAfter)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the certificate was not renewed before it expired")
		}
	}
	if got := testutil.ToFloat64(f.m.m.certs.WithLabelValues("renewed")); got != 1 {
		t.Fatalf("renewed = %v, want 1", got)
	}
	if n := f.pebble.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders, want 2", n)
	}
}

// A validation that fails is counted by the CA's reason, recorded as the
// name's last error in the store, and backs the name off: the next
// handshake sends no order.
func TestManagerFailedValidationBacksOff(t *testing.T) {
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	f := newFixtureWith(t, config.ChallengeHTTP, shopApp, silent, 0)
	if got := f.handshake(t, "shop.example.com"); !got.Equal(f.fallback) {
		t.Fatalf("got %v, want the listener's certificate", got.Subject)
	}
	if n := f.pebble.Orders(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if got := testutil.ToFloat64(f.m.m.failed.WithLabelValues("unauthorized")); got != 1 {
		t.Fatalf("failures{unauthorized} = %v", got)
	}
	ci, err := Cert(context.Background(), f.m.o.Storage, "shop.example.com")
	if err != nil || !strings.Contains(ci.LastError, "unauthorized") || ci.ErrorAt.IsZero() {
		t.Fatalf("Cert = %+v, %v; want the failure recorded", ci, err)
	}
	f.handshake(t, "shop.example.com")
	if n := f.pebble.Orders(); n != 1 {
		t.Fatalf("the second handshake sent an order during the backoff (%d orders)", n)
	}
	if got := testutil.ToFloat64(f.m.m.refused.WithLabelValues(ReasonBackoff)); got != 1 {
		t.Fatalf("refused{backoff} = %v", got)
	}
}
