// Package pebbletest runs Pebble, Let's Encrypt's test ACME CA, for tests:
// on 127.0.0.1, with validations sent to the ports a test names (levee's
// listeners) and every name resolved to 127.0.0.1 by a DNS server of its
// own. Pebble is the binary `go install
// github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3` makes (.ci/run
// installs it). Tests skip when it is missing, and fail instead when
// LEVEE_REQUIRE_PEBBLE=1, as CI sets.
package pebbletest

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/leveeproxy/levee/internal/testcert"
	"github.com/leveeproxy/levee/internal/testlog"
)

// startDeadline bounds Pebble's start: a bound for a failure report, not
// how long it takes (a few milliseconds).
const startDeadline = 30 * time.Second

// Pebble is one running pebble process.
type Pebble struct {
	// Directory is the ACME directory URL; Roots trusts its HTTPS
	// certificate (write RootsFile's into tls.acme.ca_root).
	Directory string
	RootsFile string
	mgmt      string
	client    *http.Client
	out       *testlog.Buffer
}

// Options say where Pebble sends validations: levee's plain listener
// (HTTP-01) and its TLS listener (TLS-ALPN-01); and how long the
// certificates it issues live (0: 90 days).
type Options struct {
	HTTP, TLS int
	Validity  time.Duration
}

// Start runs pebble for t alone, stopped when t ends.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	bin := lookBin(t)
	dir := t.TempDir()
	dnsAddr := startDNS(t)
	certPEM, keyPEM := testcert.PEM(t, "127.0.0.1", "localhost")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr, mgmt := freeAddrs(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": addr, "managementListenAddress": mgmt,
		"certificate": write("cert.pem", certPEM), "privateKey": write("key.pem", keyPEM),
		"httpPort": o.HTTP, "tlsPort": o.TLS,
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
		"profiles": map[string]any{"default": map[string]any{
			"description": "default", "validityPeriod": int(cmp.Or(o.Validity, 90*24*time.Hour).Seconds()),
		}},
	}}
	cj, _ := json.Marshal(cfg)
	cmd := exec.Command(bin, "-config", write("pebble.json", cj), "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	p := &Pebble{Directory: "https://" + addr + "/dir", RootsFile: write("roots.pem", certPEM),
		mgmt: "https://" + mgmt, out: &testlog.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("pebbletest: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // by its own PID
		<-exited
		if t.Failed() {
			t.Logf("pebble's output:\n%s", p.out.String())
		}
	})
	p.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: testcert.Pool(t, certPEM)}}}
	deadline := time.Now().Add(startDeadline)
	for {
		resp, err := p.client.Get(p.Directory)
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("pebbletest: pebble exited: %s", p.out.String())
		case <-time.After(20 * time.Millisecond): // polling a process's start: no event to wait on
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebbletest: pebble did not answer within %s: %v", startDeadline, err)
		}
	}
	return p
}

// Orders is how many orders Pebble has accepted: Pebble's own count.
func (p *Pebble) Orders() int { return strings.Count(p.out.String(), "Added order ") }

// Requests is how many ACME requests Pebble has handled, of any kind
// (directory, nonce, account, order, authorization, challenge,
// finalize, certificate): the lines its front end logs as it hands each
// to a handler. Start's own polls of the directory are among them.
func (p *Pebble) Requests() int { return strings.Count(p.out.String(), " -> calling handler()") }

// Root is the root of the certificates Pebble issues.
func (p *Pebble) Root(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := p.client.Get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebbletest: /roots/0 is not PEM: %q", b)
	}
	return pool
}

func lookBin(t testing.TB) string {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		if os.Getenv("LEVEE_REQUIRE_PEBBLE") == "1" {
			t.Fatalf("pebbletest: %v, and LEVEE_REQUIRE_PEBBLE=1", err)
		}
		t.Skipf("pebbletest: %v (go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3); "+
			"set LEVEE_REQUIRE_PEBBLE=1 to fail instead", err)
	}
	return bin
}

// findBin is $LEVEE_PEBBLE_BIN, pebble on $PATH, or in go install's
// directory ($GOBIN, else the first $GOPATH's bin).
func findBin() (string, error) {
	if p := os.Getenv("LEVEE_PEBBLE_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("pebble"); err == nil {
		return p, nil
	}
	for _, env := range []string{"GOBIN", "GOPATH"} {
		out, err := exec.Command("go", "env", env).Output()
		d := strings.Split(strings.TrimSpace(string(out)), string(os.PathListSeparator))[0]
		if err != nil || d == "" {
			continue
		}
		if env == "GOPATH" {
			d = filepath.Join(d, "bin")
		}
		if p := filepath.Join(d, "pebble"); fileExists(p) {
			return p, nil
		}
	}
	return "", errors.New("no pebble binary ($LEVEE_PEBBLE_BIN, $PATH, go install's bin)")
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// freeAddrs returns two distinct free ports' addresses: both are held
// until both are picked, so the kernel cannot hand out one twice.
func freeAddrs(t testing.TB) (string, string) {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs[0], addrs[1]
}

// startDNS answers every A question with 127.0.0.1 (and every other with
// no answer), on UDP and TCP at the address it returns, until t ends.
func startDNS(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		for _, qu := range q.Question {
			if qu.Qtype == dns.TypeA {
				r.Answer = append(r.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: qu.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A:   net.IPv4(127, 0, 0, 1)})
			}
		}
		w.WriteMsg(r)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		done := make(chan struct{})
		go func() { srv.ActivateAndServe(); close(done) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.ShutdownContext(ctx)
			<-done
		})
	}
	return pc.LocalAddr().String()
}
