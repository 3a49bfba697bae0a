package acme

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// 10,000 catalog hostnames with tls: acme, and a flood of handshakes for
// 10,000 unknown names: the unknown names cause no order (Pebble's
// count) and are only counted; the known ones never cause more orders
// than the budget allows (here 5 an hour); and a name that has its
// certificate is served from the cache, asking neither the catalog nor
// the CA.
func TestFloodSpendsNoBudget(t *testing.T) {
	leaktest.CheckIgnoring(t, "certmagic.(*RingBufferRateLimiter).loop")
	f := newFixture(t, config.ChallengeTLSALPN, shopApp)
	const known = 10_000
	var catalogAsked atomic.Int64
	f.m.SetStored(func(_ context.Context, host string) ([]string, *config.AppTLS, bool, error) {
		catalogAsked.Add(1)
		var i int
		if n, err := fmt.Sscanf(host, "t%d.tenants.example.net", &i); n == 1 && err == nil && i < known {
			return []string{host}, &config.AppTLS{Mode: config.AppTLSACME}, true, nil
		}
		return nil, nil, false, nil
	})
	budgets := config.DefaultTLS().ACME.Budgets
	budgets.Orders = config.Budget{Max: 5, Per: config.Duration(time.Hour)}
	f.m.budgets.local = NewBudgets(budgets)

	// The flood of unknown names, through the listeners' GetCertificate
	// as handshakes call it (8 at a time).
	const unknown = 10_000
	var wg sync.WaitGroup
	var ours atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < unknown; i += 8 {
				hello := &tls.ClientHelloInfo{ServerName: fmt.Sprintf("u%d.evil.example.com", i)}
				if _, mine, _ := f.m.Certificate(hello); mine {
					ours.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ours.Load() != 0 {
		t.Fatalf("%d unknown names were taken as ACME's", ours.Load())
	}
	if n := f.pebble.Orders(); n != 0 {
		t.Fatalf("unknown names caused %d orders", n)
	}
	if got := testutil.ToFloat64(f.m.m.refused.WithLabelValues(ReasonUnknown)); got != unknown {
		t.Fatalf("refused{unknown} = %v, want %d", got, unknown)
	}

	// Twenty known names, one real handshake each: five certificates,
	// then the order budget refuses the rest, which get the listener's.
	for i := range 20 {
		got := f.handshake(t, fmt.Sprintf("t%d.tenants.example.net", i))
		if issued := !got.Equal(f.fallback); issued != (i < 5) {
			t.Fatalf("name %d: issued %v", i, issued)
		}
	}
	if n := f.pebble.Orders(); n != 5 {
		t.Fatalf("Pebble counted %d orders; the budget allows 5", n)
	}
	if got := testutil.ToFloat64(f.m.m.refused.WithLabelValues(ReasonOrders)); got != 15 {
		t.Fatalf("refused{orders} = %v, want 15", got)
	}

	// A name with its certificate: a cache read, nothing else.
	asked := catalogAsked.Load()
	for range 100 {
		if got := f.handshake(t, "t0.tenants.example.net"); got.Equal(f.fallback) || !strings.HasPrefix(got.DNSNames[0], "t0.") {
			t.Fatalf("t0 served %v", got.DNSNames)
		}
	}
	if catalogAsked.Load() != asked {
		t.Fatalf("handshakes for a name with a certificate asked the catalog %d times", catalogAsked.Load()-asked)
	}
	if n := f.pebble.Orders(); n != 5 {
		t.Fatalf("%d orders after the cached handshakes", n)
	}
}
