package acme

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"

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
