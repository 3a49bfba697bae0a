package acme

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/pebbletest"
)

// Three instances on one PostgreSQL catalog, each asked for the same two
// names at once: one order per name in total (Pebble's count), and every
// instance serves each certificate (verified against Pebble's root). The
// CA validates at the first instance's listeners whichever instance
// ordered: challenges are kept in the store.
func TestFleetOrdersEachNameOnce(t *testing.T) {
	dsn := pg.Database(t) // the shared server outlives the test, by design
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	lns := make([][2]net.Listener, 3)
	for i := range lns {
		lns[i] = [2]net.Listener{listen(t), listen(t)} // TLS, plain
	}
	p := pebbletest.Start(t, pebbletest.Options{TLS: port(lns[0][0]), HTTP: port(lns[0][1])})
	cfg := testConfig(t, p, "postgres: '"+dsn+"'", config.ChallengeTLSALPN, `
  shop: {hosts: [shop.example.com], backends: ["127.0.0.1:9"], tls: acme}
  blog: {hosts: [blog.example.org], backends: ["127.0.0.1:9"], tls: acme}
`)
	fleet := make([]*fixture, 3)
	for i := range fleet {
		st, err := OpenStorage(context.Background(), StorageOptions{Postgres: dsn, Key: cfg.TLS.ACME.Key()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fleet[i] = serveManager(t, cfg, st, lns[i][0], lns[i][1], 0, true)
	}
	roots := p.Root(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for _, f := range fleet {
		for _, name := range []string{"shop.example.com", "blog.example.org"} {
			wg.Go(func() {
				c, err := tls.Dial("tcp", f.tlsAddr, &tls.Config{ServerName: name, RootCAs: roots})
				if err != nil {
					errs <- err
					return
				}
				leaf := c.ConnectionState().PeerCertificates[0]
				c.Close()
				if err := leaf.VerifyHostname(name); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := p.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders for 2 names on 3 instances, want 2", n)
	}
}

// twoOnOneStore starts two Managers with apps on one SQLite store, each
// behind listeners of its own, and Pebble validating at the first's.
func twoOnOneStore(t *testing.T, apps string, o Options) (p *pebbletest.Pebble, a, b *fixture) {
	tlsA, httpA, tlsB, httpB := listen(t), listen(t), listen(t), listen(t)
	p = pebbletest.Start(t, pebbletest.Options{TLS: port(tlsA), HTTP: port(httpA)})
	cfg := testConfig(t, p, "sqlite: "+filepath.Join(t.TempDir(), "c.db"), config.ChallengeTLSALPN, apps)
	var fs []*fixture
	for _, lns := range [][2]net.Listener{{tlsA, httpA}, {tlsB, httpB}} {
		st, err := OpenStorage(context.Background(), StorageOptions{SQLite: cfg.Catalog.SQLite, Key: cfg.TLS.ACME.Key()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fs = append(fs, serveManagerWith(t, cfg, st, lns[0], lns[1], o, true))
	}
	return p, fs[0], fs[1]
}

// notesTo is a change feed in memory: a note reaches every Manager told.
type notesTo struct{ ms []*Manager }

func (n *notesTo) NoteCertificates(_ context.Context, hosts []string, _ time.Time) error {
	for _, m := range n.ms {
		m.CertificatesWritten(hosts)
	}
	return nil
}

// A certificate one instance issues, then renews, reaches the other's
// cache through the feed, with no handshake there asking for it: the
// other serves it without waiting, and the renewed one in place of the
// old, long before its own renewal time.
func TestFeedBringsIssuedAndRenewedCertificates(t *testing.T) {
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	feed := &notesTo{}
	p, a, b := twoOnOneStore(t, shopApp, Options{Notes: feed})
	feed.ms = []*Manager{a.m, b.m}
	const name = "shop.example.com"
	first := a.handshake(t, name)
	leaktest.WaitFor(t, leaktest.Wait, "b caches the issued certificate", func() bool {
		c := b.m.cached(name)
		return c != nil && c.Leaf.Equal(first)
	})
	if got := b.handshake(t, name); !got.Equal(first) {
		t.Fatalf("b served %v, want a's certificate", got.Subject)
	}
	if got := testutil.ToFloat64(b.m.m.waits); got != 0 {
		t.Fatalf("b's handshake waited (%v)", got)
	}
	if err := a.m.Renew(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	renewed := a.handshake(t, name)
	if renewed.Equal(first) {
		t.Fatal("a serves the old certificate after its renewal")
	}
	leaktest.WaitFor(t, leaktest.Wait, "b serves the renewed certificate", func() bool {
		return b.handshake(t, name).Equal(renewed)
	})
	if n := len(b.m.cache.AllMatchingCertificates(name)); n != 1 {
		t.Fatalf("b caches %d certificates of %s, want the renewed one alone", n, name)
	}
	if n := p.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders, want 2", n)
	}
	if got := testutil.ToFloat64(b.m.m.fleet.WithLabelValues(fleetLoaded)); got < 2 {
		t.Fatalf("b loaded %v certificates from the feed, want 2", got)
	}
}

// Two instances on one store spend from one order budget, through real
// orders: with 2 orders an hour, one name issued on each, a third name is
// refused on both, and Pebble counts 2 orders, not the 4 two budgets of
// their own would have allowed.
func TestFleetSpendsOneOrderBudget(t *testing.T) {
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	p, a, b := twoOnOneStore(t, `
  shop: {hosts: [a.example.com, b.example.org, c.example.net], backends: ["127.0.0.1:9"], tls: acme}
`, Options{})
	budgets := letsEncrypt()
	budgets.Orders = config.Budget{Max: 2, Per: config.Duration(time.Hour)}
	a.m.budgets.local, b.m.budgets.local = NewBudgets(budgets), NewBudgets(budgets)
	for _, h := range []struct {
		f      *fixture
		name   string
		issued bool
	}{{a, "a.example.com", true}, {b, "b.example.org", true}, {b, "c.example.net", false}, {a, "c.example.net", false}} {
		if got := h.f.handshake(t, h.name); got.Equal(h.f.fallback) == h.issued {
			t.Fatalf("%s: issued %v, want %v", h.name, !got.Equal(h.f.fallback), h.issued)
		}
	}
	if n := p.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders; the fleet's budget allows 2", n)
	}
}
