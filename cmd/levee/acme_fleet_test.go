package main

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/pebbletest"
	"github.com/leveeproxy/levee/internal/testcert"
)

// acmeRig is what levee serve processes with tls.acme share in a test:
// one Pebble, validating TLS-ALPN-01 at the first instance's TLS
// listener (the challenges are kept in the store, so that one answers
// for the fleet), one ACME key file, one listener certificate, one admin
// token.
type acmeRig struct {
	pebble      *pebbletest.Pebble
	roots       *x509.CertPool // Pebble's issued certificates'
	tlsAddr     string         // the first instance's TLS listener
	acmeYAML    string         // the tls: section
	listenerTLS string         // the listener's {cert, key}
	tokenFile   string
	catalogYAML string // the content of catalog: {...}
}

const rigToken = "acme-rig-token-0123456789abcdef"

func newACMERig(t *testing.T, catalogYAML, acmeExtra string) *acmeRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // levee binds it again below; Pebble only needs the port now
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	p := pebbletest.Start(t, pebbletest.Options{TLS: port})
	dir := t.TempDir()
	keyFile := writeFile(t, filepath.Join(dir, "acme.key"), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))
	certFile, certKey := testcert.Files(t, "listener.invalid")
	r := &acmeRig{pebble: p, roots: p.Root(t), tlsAddr: addr, catalogYAML: catalogYAML,
		tokenFile: writeFile(t, filepath.Join(dir, "admin.token"), rigToken)}
	// first_wait: a bound for a failure, not a measure.
	r.acmeYAML = fmt.Sprintf("tls:\n  acme: {ca: %q, ca_root: %s, key_file: %s, challenges: [tls-alpn-01], first_wait: 30s%s}\n",
		p.Directory, p.RootsFile, keyFile, acmeExtra)
	r.listenerTLS = fmt.Sprintf("{cert: %s, key: %s}", certFile, certKey)
	return r
}

// acmeLevee is one levee serve process of a rig.
type acmeLevee struct {
	*proc
	tlsAddr, admin string
	client         *http.Client
}

var acmeServing = regexp.MustCompile(`msg="levee serving" listen=\[([^\] ]+)\] admin=(\S+)`)

// start runs levee serve with its TLS listener at addr ("": any port).
func (r *acmeRig) start(t *testing.T, addr string) *acmeLevee {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cfg := fmt.Sprintf("listen: [{addr: %s, tls: %s}]\nadmin: {addr: 127.0.0.1:0, token_file: %s}\ncatalog: {%s}\n%s",
		addr, r.listenerTLS, r.tokenFile, r.catalogYAML, r.acmeYAML)
	path := writeFile(t, filepath.Join(t.TempDir(), "levee.yaml"), cfg)
	p := startLevee(t, "serve", "--config", path)
	m := p.waitOutput(p.stderr, acmeServing)
	return &acmeLevee{proc: p, tlsAddr: m[1], admin: "http://" + m[2],
		client: &http.Client{Timeout: waitTimeout}}
}

// handshake connects for name and returns the certificate presented,
// verified against Pebble's root when verify (an error when it does not
// verify).
func (l *acmeLevee) handshake(r *acmeRig, name string, verify bool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: waitTimeout}
	c, err := tls.DialWithDialer(d, "tcp", l.tlsAddr, &tls.Config{ServerName: name, RootCAs: r.roots, InsecureSkipVerify: !verify})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// metric is the value of the sample line of the admin's /metrics that
// starts with series (name and labels, as printed).
func (l *acmeLevee) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := l.client.Get(l.admin + "/metrics")
	if err != nil {
		l.fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				l.fatalf("metric %s: %v", series, err)
			}
			return v
		}
	}
	return 0 // a counter never incremented is not printed
}

// obtainedAt is when l logged that it obtained name's certificate (a
// renewal or not), from its log line's own time; ok false before that.
func (l *acmeLevee) obtainedAt(name string, renewal bool) (time.Time, bool) {
	re := regexp.MustCompile(`time=(\S+) level=INFO msg="acme: certificate obtained" name=` + regexp.QuoteMeta(name) +
		` renewal=` + strconv.FormatBool(renewal))
	m := re.FindStringSubmatch(l.stderr.String())
	if m == nil {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	return at, err == nil
}

// TestThreeLeveesOneOrderEveryOneServesWithinTwoSeconds: three levee
// serve processes on one PostgreSQL catalog and one Pebble. Handshakes
// for a catalog app's name reach all three at once: Pebble counts one
// order, and every instance serves the certificate (verified against
// Pebble's root). Then one instance renews it: Pebble counts one more
// order, and the two others, polled by real handshakes, present the new
// certificate within 2 s of its issuance (the time the issuer logged),
// the promise. catalog.watch is a minute: only the change feed's
// NOTIFY brings it that soon, and their own renewal is 52 days away.
func TestThreeLeveesOneOrderEveryOneServesWithinTwoSeconds(t *testing.T) {
	skipH2C(t)
	dsn := pg.Database(t)
	dir := t.TempDir()
	apps := writeFile(t, filepath.Join(dir, "apps.jsonl"),
		`{"name":"shop","hosts":["shop.example.com"],"backends":["127.0.0.1:9"],"tls":"acme"}`+"\n")
	if code, _, errOut := runLevee(t, "catalog", "import", "--postgres", dsn, apps); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	r := newACMERig(t, "postgres: '"+dsn+"', watch: 1m", "")
	fleet := []*acmeLevee{r.start(t, r.tlsAddr), r.start(t, ""), r.start(t, "")}
	const name = "shop.example.com"

	// The first certificate: every instance asked at once.
	served := make([]time.Time, len(fleet))
	leaves := make([]*x509.Certificate, len(fleet))
	var wg sync.WaitGroup
	errs := make([]error, len(fleet))
	for i, l := range fleet {
		wg.Go(func() {
			leaves[i], errs[i] = l.handshake(r, name, true)
			served[i] = time.Now()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("levee %d: %v", i, err)
		}
		if !leaves[i].Equal(leaves[0]) {
			t.Fatalf("levee %d serves another certificate than levee 0", i)
		}
	}
	if n := r.pebble.Orders(); n != 1 {
		t.Fatalf("Pebble counted %d orders for one name on three instances, want 1", n)
	}
	issuer := -1
	var issued time.Time
	for i, l := range fleet {
		if at, ok := l.obtainedAt(name, false); ok {
			if issuer >= 0 {
				t.Fatalf("levees %d and %d both obtained %s", issuer, i, name)
			}
			issuer, issued = i, at
		}
	}
	if issuer < 0 {
		t.Fatal("no levee logged obtaining the certificate")
	}
	for i := range fleet {
		t.Logf("first issuance (levee %d): levee %d presented it %v after", issuer, i, served[i].Sub(issued).Round(time.Millisecond))
	}

	// A renewal on one instance reaches the others through the feed.
	renewer := fleet[(issuer+1)%len(fleet)]
	req, _ := http.NewRequest(http.MethodPost, renewer.admin+"/api/certs/"+name+"/renew", nil)
	req.Header.Set("Authorization", "Bearer "+rigToken)
	if code, body, err := do(renewer.client, req); err != nil || code != http.StatusOK {
		t.Fatalf("renew: %d %s %v", code, body, err)
	}
	renewed, ok := renewer.obtainedAt(name, true)
	if !ok {
		t.Fatal("the renewer did not log the renewal")
	}
	deadline := renewed.Add(waitTimeout) // a bound for the failure report; the promise is checked below
	var worst time.Duration
	for i, l := range fleet {
		var lag time.Duration
		within(t, deadline, fmt.Sprintf("levee %d serves the renewed certificate", i), func() (bool, string) {
			leaf, err := l.handshake(r, name, true)
			if err != nil || leaf.Equal(leaves[0]) {
				return false, fmt.Sprintf("old certificate or %v", err)
			}
			lag = time.Since(renewed)
			return true, ""
		})
		t.Logf("renewal (levee %d): levee %d presented the new certificate %v after", (issuer+1)%len(fleet), i, lag.Round(time.Millisecond))
		worst = max(worst, lag)
	}
	if worst > 2*time.Second {
		t.Errorf("an instance served the renewed certificate %v after its issuance; the promise is 2s", worst)
	}
	if n := r.pebble.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders after the renewal, want 2", n)
	}
}

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
