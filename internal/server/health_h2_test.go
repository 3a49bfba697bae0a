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

// h2OnlyBackend serves HTTP/2 only (h2c with prior knowledge; on TLS when
// cert is set): /healthz answers code, other paths "ok". probes counts the
// /healthz requests that reached it.
func h2OnlyBackend(t *testing.T, code *atomic.Int64, cert, key []byte) (srv *httptest.Server, probes *atomic.Int64) {
	t.Helper()
	probes = new(atomic.Int64)
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			w.WriteHeader(int(code.Load()))
			return
		}
		io.WriteString(w, "ok")
	}))
	if cert == nil {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	} else {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.EnableHTTP2 = true
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
	return srv, probes
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

// An h2c-only backend (before the fix every probe was HTTP/1.1, and such a
// backend was unhealthy for good): the probes reach it over h2c and judge
// its answer, it is healthy once /healthz says so, traffic flows, and it is
// unhealthy once it stops.
func TestHealthChecksOverH2C(t *testing.T) {
	leaktest.Check(t)
	var code atomic.Int64
	code.Store(503)
	srv, probes := h2OnlyBackend(t, &code, nil, nil)
	addr := srv.Listener.Addr().String()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    upstream: {protocol: h2c}
    health: {path: /healthz, interval: 5s, timeout: 5s, healthy: 1, unhealthy: 1}
`, addr), clk)
	waitHealth(t, p, clk, "a", addr, false)
	code.Store(200)
	waitHealth(t, p, clk, "a", addr, true)
	if probes.Load() < 2 {
		t.Fatalf("%d probes reached the backend; want its 503 and its 200", probes.Load())
	}
	if resp := p.get("a.test", "/"); resp.StatusCode != 200 || readAll(t, resp) != "ok" {
		t.Fatalf("request through levee: %d; want 200 ok", resp.StatusCode)
	}
	srv.CloseClientConnections()
	srv.Close()
	waitHealth(t, p, clk, "a", addr, false)
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
	var code atomic.Int64
	code.Store(503)
	srv, probes := h2OnlyBackend(t, &code, cert, key)
	addr := srv.Listener.Addr().String()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
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
`, addr, ca, wrong), clk)
	waitHealth(t, p, clk, "good", addr, false)
	code.Store(200)
	waitHealth(t, p, clk, "good", addr, true)
	if probes.Load() < 2 {
		t.Fatalf("%d probes reached the backend; want its 503 and its 200", probes.Load())
	}
	if resp := p.get("good.test", "/"); resp.StatusCode != 200 || readAll(t, resp) != "ok" {
		t.Fatalf("request through levee: %d; want 200 ok", resp.StatusCode)
	}
	waitHealth(t, p, clk, "bad", addr, false)
	for range 3 { // it stays so, round after round
		clk.Advance(5 * time.Second)
		if p.healthyIn("bad", addr) {
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
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf(`
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
`, addr), clk)
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
