package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodEnv sets how many catalog hostnames and unknown names
// TestACMEFloodThroughTheCatalog uses: 10000 is the figure; CI
// runs floodDefault.
const (
	floodEnv     = "LEVEE_ACME_FLOOD"
	floodDefault = 1000
)

func floodNames(t *testing.T) int {
	s := os.Getenv(floodEnv)
	if s == "" {
		return floodDefault
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 10 {
		t.Fatalf("%s=%q: want a count of at least 10", floodEnv, s)
	}
	return n
}

// floodWorkers is how many handshakes the flood keeps in flight: enough
// to keep levee busy on a shared machine, not a load generator.
const floodWorkers = 4

// flood runs do for names(0..n-1), floodWorkers at a time, and returns
// how many failed and the first failure.
func flood(n int, name func(int) string, do func(string) error) (failed int64, first error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range floodWorkers {
		wg.Go(func() {
			for i := w; i < n; i += floodWorkers {
				if err := do(name(i)); err != nil {
					mu.Lock()
					failed++
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed, first
}

// measured is handshakes for names that have a certificate, one at a
// time until stop closes (or n of them when stop is nil): how long each
// took (connect and handshake), each checked to present its own name's
// certificate.
func (l *acmeLevee) measure(t *testing.T, r *acmeRig, names []string, n int, stop <-chan struct{}) []time.Duration {
	var out []time.Duration
	for i := 0; stop != nil || i < n; i++ {
		if stop != nil {
			select {
			case <-stop:
				return out
			default:
			}
		}
		name := names[i%len(names)]
		start := time.Now()
		leaf, err := l.handshake(r, name, true)
		if err != nil {
			t.Errorf("a handshake for %s, which has its certificate: %v", name, err)
			return out
		}
		out = append(out, time.Since(start))
		if leaf.Subject.CommonName != name && (len(leaf.DNSNames) == 0 || leaf.DNSNames[0] != name) {
			t.Errorf("%s presented %v", name, leaf.DNSNames)
			return out
		}
	}
	return out
}

// floodMeasured floods l with handshakes for name(0..n-1) (any
// certificate accepted) while the held names are handshaken one at a
// time alongside, and returns how long those took.
func (l *acmeLevee) floodMeasured(t *testing.T, r *acmeRig, held []string, n int, name func(int) string) (during []time.Duration, failed int64, first error) {
	stop := make(chan struct{})
	var measuring sync.WaitGroup
	measuring.Go(func() { during = l.measure(t, r, held, 0, stop) })
	failed, first = flood(n, name, func(name string) error {
		_, err := l.handshake(r, name, false) // its own certificate, or the listener's
		return err
	})
	close(stop)
	measuring.Wait()
	return during, failed, first
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1].Round(10 * time.Microsecond)
}

// TestACMEFloodThroughTheCatalog: a levee serve process whose catalog
// (SQLite) holds N hostnames with tls: acme (N = $LEVEE_ACME_FLOOD, 10000
// for the figure; 1000 in CI), on Pebble, with an order budget
// of 8 an hour. Three names get their certificates; then real handshakes
// flood it:
//   - N unknown names: no order (Pebble's count), each counted as
//     refused{unknown}, and no handshake waits on an issuance
//     (levee_acme_handshake_waits_total does not move), while the names
//     with a certificate are handshaken alongside;
//   - every catalog hostname once: Pebble counts no more orders than the
//     budget allows in the test's window, and exactly the orders levee
//     counted sending.
//
// The p99 of the handshakes for names with a certificate, alone, during
// a control flood of as many handshakes for those names themselves (the
// machine's share of any rise), and during each flood, is logged; it is
// a figure for docs/tls.md, not an assertion.
func TestACMEFloodThroughTheCatalog(t *testing.T) {
	skipH2C(t)
	n := floodNames(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "catalog.db")
	var apps strings.Builder
	known := func(i int) string { return fmt.Sprintf("t%d.tenants.example.net", i) }
	for i := range n {
		fmt.Fprintf(&apps, `{"name":"t%d","hosts":[%q],"backends":["127.0.0.1:9"],"tls":"acme"}`+"\n", i, known(i))
	}
	if code, _, errOut := runLeveeWithin(t, time.Minute, "catalog", "import", "--db", db,
		writeFile(t, filepath.Join(dir, "apps.jsonl"), apps.String())); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	const budget = 8
	// The loader's rate is lifted: the flood must reach the budgets, not
	// stop at the loader.
	r := newACMERig(t, "sqlite: "+db+", loader: {rate: 1000000/s}",
		fmt.Sprintf(", budgets: {orders: {max: %d, per: 1h}}", budget))
	l := r.start(t, r.tlsAddr)
	began := time.Now()
	held := []string{known(0), known(1), known(2)}
	for _, name := range held {
		if _, err := l.handshake(r, name, true); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	const waitsTotal = "levee_acme_handshake_waits_total"
	waits := l.metric(t, waitsTotal)
	alone := l.measure(t, r, held, 300, nil)
	if got := l.metric(t, waitsTotal); got != waits {
		t.Fatalf("handshakes for names with a certificate waited on issuance %v times", got-waits)
	}

	// The control: as many handshakes, for the held names themselves; what
	// the held names' p99 does under it is the machine's share, not ACME's.
	held3 := func(i int) string { return held[i%len(held)] }
	control, failed, first := l.floodMeasured(t, r, held, n, held3)
	if failed > 0 {
		t.Fatalf("%d handshakes for held names failed; first: %v", failed, first)
	}

	// The flood of unknown names, the held names handshaken alongside.
	during, failed, first := l.floodMeasured(t, r, held, n, func(i int) string { return fmt.Sprintf("u%d.evil.example.com", i) })
	if failed > 0 {
		t.Fatalf("%d handshakes for unknown names failed; first: %v", failed, first)
	}
	if o := r.pebble.Orders(); o != len(held) {
		t.Fatalf("Pebble counted %d orders after the flood of unknown names, want %d (the held names')", o, len(held))
	}
	if got := l.metric(t, `levee_acme_refused_total{reason="unknown"}`); got != float64(n) {
		t.Fatalf("refused{unknown} = %v, want %d", got, n)
	}
	if got := l.metric(t, waitsTotal); got != waits {
		t.Fatalf("%v handshakes waited on an issuance during the flood of unknown names", got-waits)
	}
	t.Logf("handshakes for names with a certificate: p99 %v alone (%d); %v during %d handshakes for them (%d); %v during %d unknown names (%d)",
		p99(alone), len(alone), p99(control), n, len(control), p99(during), n, len(during))

	// Every catalog hostname once: the budget bounds the orders.
	during, failed, first = l.floodMeasured(t, r, held, n, known)
	if failed > 0 {
		t.Fatalf("%d handshakes for catalog names failed; first: %v", failed, first)
	}
	window := time.Since(began)
	allowed := budget + int(float64(budget)*window.Hours()) // a bucket of 8, refilled at 8 an hour
	orders := r.pebble.Orders()
	if orders > allowed {
		t.Fatalf("Pebble counted %d orders in %v; the budget allows %d", orders, window.Round(time.Second), allowed)
	}
	if sent := l.metric(t, "levee_acme_orders_total"); sent != float64(orders) {
		t.Fatalf("levee counted %v orders sent, Pebble %d", sent, orders)
	}
	if refused := l.metric(t, `levee_acme_refused_total{reason="orders"}`); refused == 0 {
		t.Fatal("the order budget never refused: the flood did not reach it")
	}
	t.Logf("every catalog hostname once: %d orders (budget %d in %v); held names' p99 %v during it (%d)",
		orders, allowed, window.Round(time.Second), p99(during), len(during))
}
