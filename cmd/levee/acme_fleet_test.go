package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
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
	held        net.Listener   // tlsAddr, held until that instance binds it
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
	// Held until levee binds it: Pebble picks its own ports by listening
	// at port 0 and closing, and would be handed this one if it were free.
	t.Cleanup(func() { ln.Close() })
	addr := ln.Addr().String()
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	p := pebbletest.Start(t, pebbletest.Options{TLS: port})
	dir := t.TempDir()
	keyFile := writeFile(t, filepath.Join(dir, "acme.key"), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))
	certFile, certKey := testcert.Files(t, "listener.invalid")
	r := &acmeRig{pebble: p, roots: p.Root(t), tlsAddr: addr, held: ln, catalogYAML: catalogYAML,
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
	if addr == r.tlsAddr && r.held != nil {
		r.held.Close()
		r.held = nil
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

// fleetServes is the promise: every instance of a fleet serves a
// certificate within this long of its issuance.
const fleetServes = 2 * time.Second

// Series of a levee's /metrics the ACME tests read.
const (
	waitsTotal  = "levee_acme_handshake_waits_total"
	fleetLoaded = `levee_acme_fleet_loads_total{result="loaded"}`
)

// TestThreeLeveesOneOrderEveryOneServesWithinTwoSeconds: three levee
// serve processes on one PostgreSQL catalog and one Pebble; every
// handshake a real one, verified against Pebble's root.
//   - Handshakes for a catalog app's name reach all three at once:
//     Pebble counts one order, and every instance presents the
//     certificate within 2 s of its issuance (the time the issuer
//     logged), the promise.
//   - A second name is asked at one instance only: each other instance
//     loads it from the change feed before any client asks there, and
//     its first handshake is served from the cache (its count of
//     handshakes that waited does not move), within 2 s of issuance.
//   - One instance renews the first name: Pebble counts one more order,
//     and the others, polled by handshakes, present the new certificate
//     within 2 s of its issuance.
//
// catalog.watch is a minute: only the change feed's NOTIFY brings a
// certificate that soon, and their own renewal is 52 days away.
func TestThreeLeveesOneOrderEveryOneServesWithinTwoSeconds(t *testing.T) {
	skipH2C(t)
	dsn := pg.Database(t)
	dir := t.TempDir()
	apps := writeFile(t, filepath.Join(dir, "apps.jsonl"),
		`{"name":"shop","hosts":["shop.example.com"],"backends":["127.0.0.1:9"],"tls":"acme"}`+"\n"+
			`{"name":"blog","hosts":["blog.example.com"],"backends":["127.0.0.1:9"],"tls":"acme"}`+"\n")
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
		lag := served[i].Sub(issued)
		t.Logf("first issuance (levee %d): levee %d presented it %v after", issuer, i, lag.Round(time.Millisecond))
		if lag > fleetServes {
			t.Errorf("levee %d served the certificate %v after its issuance; the promise is %v", i, lag, fleetServes)
		}
	}
	// Each instance, the issuer too, is told of it by the feed once.
	for i, l := range fleet {
		within(t, issued.Add(waitTimeout), fmt.Sprintf("levee %d is told of %s by the feed", i, name), func() (bool, string) {
			n := l.metric(t, fleetLoaded)
			return n >= 1, fmt.Sprintf("%s %v", fleetLoaded, n)
		})
	}

	quietServesFromTheFeed(t, r, fleet)

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
	if worst > fleetServes {
		t.Errorf("an instance served the renewed certificate %v after its issuance; the promise is %v", worst, fleetServes)
	}
	if n := r.pebble.Orders(); n != 3 {
		t.Fatalf("Pebble counted %d orders after the renewal, want 3 (two names, one renewal)", n)
	}
}

// quietServesFromTheFeed asks blog.example.com's certificate of fleet[1]
// alone; the other instances must have it in their caches, loaded from
// the change feed, and serve it within fleetServes of its issuance
// without their first handshake for it waiting.
func quietServesFromTheFeed(t *testing.T, r *acmeRig, fleet []*acmeLevee) {
	t.Helper()
	const name = "blog.example.com"
	loaded := make([]float64, len(fleet))
	waits := make([]float64, len(fleet))
	for i, l := range fleet {
		loaded[i], waits[i] = l.metric(t, fleetLoaded), l.metric(t, waitsTotal)
	}
	asker := fleet[1]
	leaf, err := asker.handshake(r, name, true)
	if err != nil {
		asker.fatalf("%s: %v", name, err)
	}
	issued, ok := asker.obtainedAt(name, false)
	if !ok {
		asker.fatalf("levee 1 did not log obtaining %s", name)
	}
	if n := r.pebble.Orders(); n != 2 {
		t.Fatalf("Pebble counted %d orders for two names, want 2", n)
	}
	for i, l := range fleet {
		if l == asker {
			continue
		}
		// Only the feed makes this count move: no client asked here.
		within(t, issued.Add(waitTimeout), fmt.Sprintf("levee %d loads %s from the feed", i, name), func() (bool, string) {
			n := l.metric(t, fleetLoaded)
			return n > loaded[i], fmt.Sprintf("%s %v", fleetLoaded, n)
		})
		got, err := l.handshake(r, name, true)
		lag := time.Since(issued)
		if err != nil || !got.Equal(leaf) {
			l.fatalf("levee %d: %s: %v, or another certificate than levee 1's", i, name, err)
		}
		if n := l.metric(t, waitsTotal); n != waits[i] {
			l.fatalf("levee %d's first handshake for %s waited (%v waits): it was not in its cache", i, name, n-waits[i])
		}
		t.Logf("a name asked at levee 1 only: levee %d served it from its cache %v after its issuance", i, lag.Round(time.Millisecond))
		if lag > fleetServes {
			t.Errorf("levee %d served %s %v after its issuance; the promise is %v", i, name, lag, fleetServes)
		}
	}
}
