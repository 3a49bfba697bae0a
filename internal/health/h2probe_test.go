package health

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/testcert"
)

// h2cServer serves h on loopback over HTTP/2 with prior knowledge only
// (no HTTP/1.1 at all); conns counts its connections.
func h2cServer(t *testing.T, h http.Handler) (srv *httptest.Server, conns *atomic.Int64) {
	t.Helper()
	srv = httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	conns = countConns(srv)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// h2cBackend is an h2c-only server answering code (200 until set) on
// /healthz, at addr.
func h2cBackend(t *testing.T) (addr string, code, conns *atomic.Int64, srv *httptest.Server) {
	t.Helper()
	code = new(atomic.Int64)
	code.Store(200)
	srv, conns = h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/healthz" || r.Header.Get("User-Agent") != "levee-health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(code.Load()))
	}))
	return srv.Listener.Addr().String(), code, conns, srv
}

// tlsBackend is a loopback HTTP/2 server on TLS for backend.test whose
// /healthz answers 200, and the pool that trusts its certificate.
func tlsBackend(t *testing.T) (string, *tls.Config) {
	t.Helper()
	cert, key := testcert.PEM(t, "backend.test")
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &tls.Config{RootCAs: testcert.Pool(t, cert)}
}

// tlsOf is a TLS builder as the leg's: the roots of tc, SNI backend.test,
// ALPN h2, verification on.
func tlsOf(tc *tls.Config) func(string) *tls.Config {
	return func(string) *tls.Config {
		return &tls.Config{RootCAs: tc.RootCAs, ServerName: "backend.test", NextProtos: []string{"h2"},
			MinVersion: tls.VersionTLS12}
	}
}

// An h2c-only backend: HTTPProber's HTTP/1.1 GET cannot tell its health
// (the defect: every such backend was unhealthy); H2Prober speaks its
// protocol, over one connection for all its probes, and judges the
// status as HTTPProber does.
func TestH2ProberH2C(t *testing.T) {
	leaktest.Check(t)
	addr, code, conns, srv := h2cBackend(t)
	if err := NewHTTPProber(time.Second).Probe(context.Background(), addr, "/healthz"); err == nil {
		t.Fatal("HTTP/1.1 probe of an h2c-only backend passed: the test's backend is not h2c-only")
	}
	conns.Store(0)
	p := NewH2Prober(H2Options{Timeout: 5 * time.Second})
	defer p.Close()
	for range 3 {
		if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
			t.Fatalf("probe of a healthy h2c backend: %v", err)
		}
	}
	code.Store(503)
	var se *StatusError
	if err := p.Probe(context.Background(), addr, "/healthz"); !errors.As(err, &se) || se.Code != 503 {
		t.Fatalf("probe of a 503: %v; want a *StatusError 503", err)
	}
	code.Store(302)
	if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
		t.Fatalf("probe of a 302: %v; want healthy", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 probes opened %d connections; want 1, kept", n)
	}
	// A connection the backend dropped is not used again: at most the
	// probe that finds it broken fails, and the next one dials anew.
	srv.CloseClientConnections()
	if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
		if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
			t.Fatalf("two probes after the connection dropped: %v; want the second on a new one", err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("after a dropped connection: %d connections; want 2", n)
	}
}

// A backend that stops answering fails the probe within the timeout, and
// a closed one fails at once.
func TestH2ProberTimeoutAndRefused(t *testing.T) {
	leaktest.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() { // accepts and never answers the preface
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	defer func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	p := NewH2Prober(H2Options{Timeout: 100 * time.Millisecond})
	defer p.Close()
	if err := p.Probe(context.Background(), ln.Addr().String(), "/healthz"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("probe of a silent backend: %v; want DeadlineExceeded", err)
	}
	ln.Close()
	if err := p.Probe(context.Background(), ln.Addr().String(), "/healthz"); err == nil {
		t.Error("probe of a closed port passed")
	}
}

// The h2 leg verifies the backend as the leg does: with its CA it is
// healthy, with another CA the handshake fails.
func TestH2ProberTLS(t *testing.T) {
	leaktest.Check(t)
	addr, good := tlsBackend(t)
	p := NewH2Prober(H2Options{Timeout: 5 * time.Second, TLS: tlsOf(good)})
	defer p.Close()
	if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
		t.Fatalf("probe with the backend's CA: %v", err)
	}
	other, _ := testcert.PEM(t, "backend.test")
	bad := NewH2Prober(H2Options{Timeout: 5 * time.Second, TLS: tlsOf(&tls.Config{RootCAs: testcert.Pool(t, other)})})
	defer bad.Close()
	var ue *tls.CertificateVerificationError
	if err := bad.Probe(context.Background(), addr, "/healthz"); !errors.As(err, &ue) {
		t.Fatalf("probe with a wrong CA: %v; want a certificate verification error", err)
	}
}

// grpcHealthBackend is a grpc-go server with the standard health service,
// whose statuses the test sets, served h2c through its http.Handler (the
// server tests use its own transport).
func grpcHealthBackend(t *testing.T) (string, *grpchealth.Server) {
	t.Helper()
	hs := grpchealth.NewServer()
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	t.Cleanup(s.Stop) // after the HTTP server's Close: cleanups run last first
	srv, _ := h2cServer(t, s)
	return srv.Listener.Addr().String(), hs
}

// The gRPC health call against grpc-go's own health server: SERVING is
// healthy, NOT_SERVING and an unknown service are not; a GET of a path
// cannot tell (grpc-go answers it 415).
func TestH2ProberGRPC(t *testing.T) {
	leaktest.Check(t)
	addr, hs := grpcHealthBackend(t)
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	ctx := context.Background()
	get := NewH2Prober(H2Options{Timeout: 5 * time.Second})
	defer get.Close()
	if err := get.Probe(ctx, addr, "/healthz"); err == nil {
		t.Error("a GET probe of a gRPC server passed; want grpc-go's refusal")
	}
	whole := NewH2Prober(H2Options{Timeout: 5 * time.Second, GRPC: true})
	defer whole.Close()
	svc := NewH2Prober(H2Options{Timeout: 5 * time.Second, GRPC: true, Service: "svc"})
	defer svc.Close()
	unknown := NewH2Prober(H2Options{Timeout: 5 * time.Second, GRPC: true, Service: "nope"})
	defer unknown.Close()
	for name, p := range map[string]*H2Prober{"whole server": whole, "svc": svc} {
		if err := p.Probe(ctx, addr, ""); err != nil {
			t.Errorf("%s SERVING: %v; want healthy", name, err)
		}
	}
	var ge *GRPCError
	if err := unknown.Probe(ctx, addr, ""); !errors.As(err, &ge) || ge.Code != 5 {
		t.Errorf("unknown service: %v; want grpc-status 5 (NOT_FOUND)", err)
	}
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := svc.Probe(ctx, addr, ""); !errors.As(err, &ge) || ge.Code != 0 || ge.Serving != 2 {
		t.Errorf("svc NOT_SERVING: %v; want a GRPCError with status NOT_SERVING", err)
	}
	hs.Shutdown() // every service NOT_SERVING
	if err := whole.Probe(ctx, addr, ""); err == nil {
		t.Error("whole server after Shutdown: healthy; want NOT_SERVING")
	}
	hs.Resume()
	if err := whole.Probe(ctx, addr, ""); err != nil {
		t.Errorf("whole server after Resume: %v; want healthy", err)
	}
}

// The messages, by hand, against their protobuf encodings.
func TestGRPCHealthMessages(t *testing.T) {
	if got, want := string(grpcHealthRequest("")), "\x00\x00\x00\x00\x00"; got != want {
		t.Errorf("request for the whole server %q; want %q", got, want)
	}
	if got, want := string(grpcHealthRequest("svc")), "\x00\x00\x00\x00\x05\x0a\x03svc"; got != want {
		t.Errorf("request for svc %q; want %q", got, want)
	}
	for _, tc := range []struct {
		body   string
		status int
		ok     bool
	}{
		{"\x00\x00\x00\x00\x02\x08\x01", 1, true},
		{"\x00\x00\x00\x00\x02\x08\x02", 2, true},
		{"\x00\x00\x00\x00\x00", 0, true},                                          // status left out: UNKNOWN
		{"\x00\x00\x00\x00\x07\x12\x03abc\x08\x01", 1, true},                       // an unknown field skipped
		{"\x00\x00\x00\x00\x0a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x08", 0, false}, // cut varint
		{"\x00\x00\x00\x00\x03\x08\x01", 0, false},                                 // length past the body
		{"\x01\x00\x00\x00\x02\x08\x01", 0, false},                                 // compressed
		{"\x00\x00\x00\x00\x02\x12\x05", 0, false},                                 // string past the message
		{"\x00\x00\x00", 0, false},
	} {
		got, err := grpcHealthStatus([]byte(tc.body))
		if (err == nil) != tc.ok || got != tc.status {
			t.Errorf("%q: %d, %v; want %d, ok %v", tc.body, got, err, tc.status, tc.ok)
		}
	}
}

// The Checker's default prober follows Check.Protocol: an h2c-only
// backend is healthy under H2C, and GRPC checks a gRPC server.
func TestCheckerProbesTheLeg(t *testing.T) {
	leaktest.Check(t)
	addr, _, _, _ := h2cBackend(t)
	rpc, hs := grpcHealthBackend(t)
	set := newSetOf(addr)
	h := startChecker(t, set, Check{Protocol: H2C, Unhealthy: 1, Healthy: 1}, CheckerOptions{})
	if st := h.c.Status(); len(st) != 1 || !st[0].Healthy || st[0].LastError != nil {
		t.Fatalf("h2c-only backend under H2C: %+v; want healthy, no error", st)
	}
	rset := newSetOf(rpc)
	g := startChecker(t, rset, Check{Protocol: H2C, GRPC: true, Unhealthy: 1, Healthy: 1}, CheckerOptions{})
	if !rset.Backend(0).Healthy(t0) || g.c.Status()[0].LastError != nil {
		t.Fatalf("SERVING gRPC backend: %+v; want healthy", g.c.Status())
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	g.round()
	if rset.Backend(0).Healthy(t0) {
		t.Fatal("NOT_SERVING gRPC backend still healthy")
	}
	if err := (Check{GRPC: true}).WithDefaults().Validate(); err == nil {
		t.Error("GRPC over HTTP1 validated")
	}
}

// keepOpen is a listener whose Close leaves it open, only ending the
// Accept under way (by a deadline): a server shut down on it hands the
// port on to the next.
type keepOpen struct{ *net.TCPListener }

func (l keepOpen) Close() error { return l.SetDeadline(time.Now()) }

// A backend's GOAWAY (a graceful shutdown) retires the connection: the
// next probe dials a new one, here to the server that took over the port.
func TestH2ProberRedialsAfterGoAway(t *testing.T) {
	leaktest.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	serve := func() (*http.Server, chan struct{}) {
		s := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
			Protocols: new(http.Protocols)}
		s.Protocols.SetUnencryptedHTTP2(true)
		s.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		ln.(*net.TCPListener).SetDeadline(time.Time{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Serve(keepOpen{ln.(*net.TCPListener)})
		}()
		return s, done
	}
	first, done := serve()
	addr := ln.Addr().String()
	p := NewH2Prober(H2Options{Timeout: 5 * time.Second})
	defer p.Close()
	if err := p.Probe(context.Background(), addr, "/"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaktest.Wait)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil { // GOAWAY, then the close
		t.Fatal(err)
	}
	<-done
	leaktest.WaitFor(t, leaktest.Wait, "the prober to see the GOAWAY", func() bool {
		p.mu.Lock()
		b := p.backends[addr]
		p.mu.Unlock()
		<-b.turn
		defer func() { b.turn <- struct{}{} }()
		return !b.cc.Usable()
	})
	second, done := serve()
	defer func() {
		second.Close()
		<-done
	}()
	if err := p.Probe(context.Background(), addr, "/"); err != nil {
		t.Fatalf("probe after GOAWAY: %v; want it on a new connection", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections; want 2: the one that went away, and a new one", n)
	}
}
