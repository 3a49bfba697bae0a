package server

// Active health checks of apps whose backends speak only HTTP/2: the
// probes go over the app's leg (h2c, or h2 with its TLS client), and
// health.grpc makes the standard gRPC health call.

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/testcert"
)

// h2Backend is a backend that serves HTTP/2 only: /healthz answers code
// (503 until the test sets it), other paths "ok"; probes counts the
// /healthz requests that reached it.
type h2Backend struct {
	srv          *httptest.Server
	addr         string
	code, probes atomic.Int64
}

// h2OnlyBackend starts an h2Backend: h2c with prior knowledge, or on TLS
// when cert (with key) is set.
func h2OnlyBackend(t *testing.T, cert, key []byte) *h2Backend {
	t.Helper()
	b := &h2Backend{}
	b.code.Store(503)
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		if r.URL.Path == "/healthz" {
			b.probes.Add(1)
			w.WriteHeader(int(b.code.Load()))
			return
		}
		io.WriteString(w, "ok")
	}))
	if cert == nil {
		b.srv.Config.Protocols = new(http.Protocols)
		b.srv.Config.Protocols.SetUnencryptedHTTP2(true)
		b.srv.Start()
	} else {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		b.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		b.srv.EnableHTTP2 = true
		b.srv.StartTLS()
	}
	t.Cleanup(b.srv.Close)
	b.addr = b.srv.Listener.Addr().String()
	return b
}

// startClocked starts levee on cfg with a fake clock, which the health
// checks' rounds wait on.
func startClocked(t *testing.T, cfg string) (*proxy, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	return startProxyClock(t, cfg, clk), clk
}

// healthyIn reports whether app's backend addr is healthy now.
func (p *proxy) healthyIn(app, addr string) bool {
	st, _ := p.srv.Table().AppStats(app)
	for _, b := range st.Backends {
		if b.Addr == addr {
			return b.Healthy
		}
	}
	return false
}

// waitHealth advances clk a round at a time until app's backend addr is
// healthy (want) or not.
func waitHealth(t *testing.T, p *proxy, clk *clock.Fake, app, addr string, want bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s's backend %s healthy=%v", app, addr, want), func() bool {
		clk.Advance(5 * time.Second) // the next round is due an interval after the last ended
		return p.healthyIn(app, addr) == want
	})
}

// comesUp sees app's backend b, whose /healthz answers 503, marked
// unhealthy by probes that reach it, then healthy once it answers 200,
// and a request to the app (host APP.test) served by it.
func comesUp(t *testing.T, p *proxy, clk *clock.Fake, app string, b *h2Backend) {
	t.Helper()
	waitHealth(t, p, clk, app, b.addr, false)
	b.code.Store(200)
	waitHealth(t, p, clk, app, b.addr, true)
	if n := b.probes.Load(); n < 2 {
		t.Fatalf("%d probes reached the backend; want its 503 and its 200", n)
	}
	if resp := p.get(app+".test", "/"); resp.StatusCode != 200 || readAll(t, resp) != "ok" {
		t.Fatalf("request through levee: %d; want 200 ok", resp.StatusCode)
	}
}

// An h2c-only backend (before the fix every probe was HTTP/1.1, and such a
// backend was unhealthy for good): the probes reach it over h2c and judge
// its answer, it is healthy once /healthz says so, traffic flows, and it is
// unhealthy once it stops.
func TestHealthChecksOverH2C(t *testing.T) {
	leaktest.Check(t)
	b := h2OnlyBackend(t, nil, nil)
	p, clk := startClocked(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    upstream: {protocol: h2c}
    health: {path: /healthz, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
`, b.addr))
	comesUp(t, p, clk, "a", b)
	b.srv.CloseClientConnections()
	b.srv.Close()
	waitHealth(t, p, clk, "a", b.addr, false)
}

// The h2 leg's probes verify the backend with the leg's TLS client: with
// its CA (upstream.tls.ca) it is healthy, with another CA it is not.
func TestHealthChecksOverH2(t *testing.T) {
	leaktest.Check(t)
	cert, key := testcert.PEM(t, "backend.test")
	other, _ := testcert.PEM(t, "backend.test")
	ca, wrong := t.TempDir()+"/ca.pem", t.TempDir()+"/wrong.pem"
	writeFile(t, ca, cert)
	writeFile(t, wrong, other)
	b := h2OnlyBackend(t, cert, key)
	p, clk := startClocked(t, fmt.Sprintf(`
apps:
  good:
    hosts: [good.test]
    backends: [%[1]s]
    upstream: {protocol: h2, tls: {ca: %[2]s, server_name: backend.test}}
    health: {path: /healthz, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
  bad:
    hosts: [bad.test]
    backends: [%[1]s]
    upstream: {protocol: h2, tls: {ca: %[3]s, server_name: backend.test}}
    health: {path: /healthz, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
`, b.addr, ca, wrong))
	comesUp(t, p, clk, "good", b)
	waitHealth(t, p, clk, "bad", b.addr, false)
	for range 3 { // it stays so, round after round
		clk.Advance(5 * time.Second)
		if p.healthyIn("bad", b.addr) {
			t.Fatal("a backend whose certificate does not chain to upstream.tls.ca was marked healthy")
		}
	}
}

// health.grpc against grpc-go's own health service: SERVING is healthy,
// NOT_SERVING is not, and an unknown service is not while the server and
// its known service are SERVING.
func TestGRPCHealthChecks(t *testing.T) {
	leaktest.Check(t)
	hs := grpchealth.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus("pkg.Echo", healthpb.HealthCheckResponse_NOT_SERVING)
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	addr := serveGRPC(t, s, "127.0.0.1:0")
	p, clk := startClocked(t, fmt.Sprintf(`
apps:
  rpc:
    hosts: [rpc.test]
    backends: [%[1]s]
    upstream: {protocol: h2c}
    health: {grpc: true, service: pkg.Echo, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
  whole:
    hosts: [whole.test]
    backends: [%[1]s]
    upstream: {protocol: h2c}
    health: {grpc: true, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
  unknown:
    hosts: [unknown.test]
    backends: [%[1]s]
    upstream: {protocol: h2c}
    health: {grpc: true, service: pkg.Nope, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
`, addr))
	for _, app := range []string{"rpc", "whole", "unknown"} {
		waitHealth(t, p, clk, app, addr, false)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("pkg.Echo", healthpb.HealthCheckResponse_SERVING)
	waitHealth(t, p, clk, "rpc", addr, true)
	waitHealth(t, p, clk, "whole", addr, true)
	if p.healthyIn("unknown", addr) {
		t.Fatal("an unknown service was marked healthy")
	}
	hs.SetServingStatus("pkg.Echo", healthpb.HealthCheckResponse_NOT_SERVING)
	waitHealth(t, p, clk, "rpc", addr, false)
}
