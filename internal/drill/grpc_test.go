package drill

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/leveeproxy/levee/internal/testcert"
)

// testService is grpc.testing.TestService as the drill uses it, as
// grpc-go's interop server serves it: UnaryCall and FullDuplexCall answer
// the payload sizes asked for and echo grpcEchoTrailer as a trailer.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func echoTrailer(ctx context.Context, set func(metadata.MD)) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(grpcEchoTrailer)) > 0 {
		set(metadata.Pairs(grpcEchoTrailer, md.Get(grpcEchoTrailer)[0]))
	}
}

func (testService) UnaryCall(ctx context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	echoTrailer(ctx, func(md metadata.MD) { grpc.SetTrailer(ctx, md) })
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, in.GetResponseSize())}}, nil
}

func (testService) FullDuplexCall(st testgrpc.TestService_FullDuplexCallServer) error {
	echoTrailer(st.Context(), st.SetTrailer)
	for {
		in, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, p := range in.GetResponseParameters() {
			if err := st.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
				return err
			}
		}
	}
}

// grpcTestBackend is a grpc-go server of testService, and of the health
// service, over h2c.
func grpcTestBackend(t *testing.T) string {
	t.Helper()
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, testService{})
	healthgrpc.RegisterHealthServer(s, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

func grpcOptions(target string) Options {
	return brief(Options{Target: target, GRPCAuthority: "rpc.drill", GRPCRateAuthority: "rate.rpc.drill",
		GRPCShedAuthority: "shed.rpc.drill", GRPCCalls: 200, GRPCHold: 8})
}

// levee with the drill's snippet passes the drill from both downstream
// protocols: h2c and h2 over TLS.
func TestGRPCDrillPassesLevee(t *testing.T) {
	backend := grpcTestBackend(t)
	o := grpcOptions("")
	snippet := GRPCSnippet(o.GRPCAuthority, o.GRPCRateAuthority, o.GRPCShedAuthority, backend)
	certFile, keyFile := testcert.Files(t, o.GRPCAuthority, o.GRPCRateAuthority, o.GRPCShedAuthority)
	cert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	h2c := "listen:\n  - {addr: 127.0.0.1:0, h2c: true}\n"
	for _, c := range []struct{ name, listen, scheme, method string }{
		{"h2c", h2c, "http://", ""},
		{"tls", fmt.Sprintf("listen:\n  - {addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}\n", certFile, keyFile), "https://", ""},
		// Another unary method, called with an empty request.
		{"health", h2c, "http://", healthgrpc.Health_Check_FullMethodName},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := startLeveeOn(t, c.listen, snippet)
			o := grpcOptions(c.scheme + strings.TrimPrefix(l.url, "http://"))
			o.GRPCCA = ca
			if c.method != "" {
				o.GRPCMethod = c.method
			}
			r := grpcDrill.Run(context.Background(), o)
			requireVerdict(t, r, Pass)
		})
	}
}

// A grpc-go server with no edge in front passes calls but refuses none:
// both refusal checks fail, saying so; a method it does not serve fails
// the unary check.
func TestGRPCDrillFailsWithoutLimits(t *testing.T) {
	backend := grpcTestBackend(t)
	o := grpcOptions("http://" + backend)
	o.GRPCMethod, o.GRPCCalls = "/no.Such/Method", 1
	r := grpcDrill.Run(context.Background(), o)
	if c := checkNamed(t, r, "unary call passes, with trailers"); c.Pass || !strings.Contains(c.Got, "UNIMPLEMENTED") {
		t.Errorf("an unserved method: pass %v, %q; want UNIMPLEMENTED", c.Pass, c.Got)
	}
	r = grpcDrill.Run(context.Background(), grpcOptions("http://"+backend))
	requireVerdict(t, r, Fail)
	for _, name := range []string{"unary call passes, with trailers", "bidirectional stream passes, with trailers"} {
		if c := checkNamed(t, r, name); !c.Pass {
			t.Errorf("%s: %s", name, c.Got)
		}
	}
	for name, why := range map[string]string{
		"rate-limited call gets RESOURCE_EXHAUSTED":              "none of 200 calls refused",
		"shed call gets UNAVAILABLE with grpc-retry-pushback-ms": "8 calls held open, none refused",
	} {
		if c := checkNamed(t, r, name); c.Pass || !strings.Contains(c.Got, why) {
			t.Errorf("%s: pass %v, %q; want a failure: %q", name, c.Pass, c.Got, why)
		}
	}
}

// An edge that refuses gRPC calls as HTTP 503 with Retry-After (what an
// HTTP proxy's limits do) fails both refusal checks: the client sees
// UNAVAILABLE for a rate limit, and no pushback.
func TestGRPCDrillFailsHTTPRefusals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	s := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rate limited", http.StatusServiceUnavailable)
	})}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Close() })
	r := grpcDrill.Run(context.Background(), grpcOptions("http://"+ln.Addr().String()))
	requireVerdict(t, r, Fail)
	for name, why := range map[string]string{
		"rate-limited call gets RESOURCE_EXHAUSTED":              "0 calls passed, then UNAVAILABLE: unexpected HTTP status code received from server: 503",
		"shed call gets UNAVAILABLE with grpc-retry-pushback-ms": "no grpc-retry-pushback-ms",
		"unary call passes, with trailers":                       "UNAVAILABLE",
	} {
		if c := checkNamed(t, r, name); c.Pass || !strings.Contains(c.Got, why) {
			t.Errorf("%s: pass %v, %q; want a failure: %q", name, c.Pass, c.Got, why)
		}
	}
}
