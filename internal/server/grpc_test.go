package server

// End-to-end tests of gRPC through levee (issue 21): a grpc-go server as
// the backend, over h2c and over h2 with TLS, and a grpc-go client over
// levee's h2c and TLS listeners. The service is hand-written over a codec
// of raw bytes (content-type application/grpc+raw), so no protoc.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/testcert"
)

// rawCodec passes messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

// echo is the backend's state, as the tests read it.
type echo struct {
	calls    atomic.Int64 // calls that reached the backend
	blocked  atomic.Int64 // Block calls waiting now
	canceled chan string  // a Block call's end, by its context's error
	// deadline is the grpc-timeout the last call came with (0: none).
	deadline atomic.Int64
	header   chan metadata.MD // the last Block call's request metadata
	delay    atomic.Int64     // how long Echo takes (a time.Duration)
}

const echoService = "test.Echo"

func (e *echo) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: echoService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			e.enter(ctx)
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			if d := time.Duration(e.delay.Load()); d > 0 {
				time.Sleep(d) // a backend's own latency, not an ordering of goroutines
			}
			grpc.SetTrailer(ctx, metadata.Pairs("x-echo-len", strconv.Itoa(len(in))))
			if bytes.HasPrefix(in, []byte("fail:")) {
				return nil, status.Error(codes.FailedPrecondition, string(in[5:]))
			}
			return &in, nil
		}}},
		Streams: []grpc.StreamDesc{
			{StreamName: "Count", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				e.enter(ss.Context())
				var in []byte
				if err := ss.RecvMsg(&in); err != nil {
					return err
				}
				n, _ := strconv.Atoi(string(in))
				for i := range n {
					out := []byte(strconv.Itoa(i))
					if err := ss.SendMsg(&out); err != nil {
						return err
					}
				}
				ss.SetTrailer(metadata.Pairs("x-count", strconv.Itoa(n)))
				return nil
			}},
			{StreamName: "Sum", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				e.enter(ss.Context())
				total := 0
				for {
					var in []byte
					err := ss.RecvMsg(&in)
					if err == io.EOF {
						out := []byte(strconv.Itoa(total))
						return ss.SendMsg(&out)
					}
					if err != nil {
						return err
					}
					total += len(in)
				}
			}},
			{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				e.enter(ss.Context())
				for {
					var in []byte
					err := ss.RecvMsg(&in)
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					if err := ss.SendMsg(&in); err != nil {
						return err
					}
				}
			}},
			{StreamName: "Block", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				e.enter(ss.Context())
				md, _ := metadata.FromIncomingContext(ss.Context())
				select {
				case e.header <- md:
				default:
				}
				e.blocked.Add(1)
				defer e.blocked.Add(-1)
				<-ss.Context().Done()
				select {
				case e.canceled <- ss.Context().Err().Error():
				default:
				}
				return ss.Context().Err()
			}},
		},
	}
}

func (e *echo) enter(ctx context.Context) {
	e.calls.Add(1)
	if dl, ok := ctx.Deadline(); ok {
		e.deadline.Store(int64(time.Until(dl)))
	} else {
		e.deadline.Store(0)
	}
}

// grpcBackend starts a grpc-go server of echo: h2c, or h2 over TLS when
// cert (PEM, with key) is set.
func grpcBackend(t *testing.T, cert, key []byte) (string, *echo) {
	t.Helper()
	e := &echo{canceled: make(chan string, 16), header: make(chan metadata.MD, 1)}
	return serveGRPC(t, echoServer(t, e, cert, key), "127.0.0.1:0"), e
}

// echoServer is a grpc-go server of e: h2c, or h2 over TLS when cert
// (PEM, with key) is set.
func echoServer(t *testing.T, e *echo, cert, key []byte) *grpc.Server {
	t.Helper()
	opts := []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(e.desc(), struct{}{})
	return s
}

// serveGRPC serves s on addr (a loopback port) until the test ends, and
// returns the address.
func serveGRPC(t *testing.T, s *grpc.Server, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return ln.Addr().String()
}

// grpcLeg is how a test's levee reaches its gRPC backend.
type grpcLeg struct {
	name     string
	upstream string // apps.NAME.upstream, as YAML
	cert     []byte // the backend's certificate (h2), nil for h2c
	key      []byte
}

func grpcLegs(t *testing.T) []grpcLeg {
	cert, key := testcert.PEM(t, "backend.test")
	ca := t.TempDir() + "/ca.pem"
	writeFile(t, ca, cert)
	return []grpcLeg{
		{name: "h2c", upstream: "{protocol: h2c}"},
		{name: "h2", upstream: fmt.Sprintf("{protocol: h2, tls: {ca: %s, server_name: backend.test}}", ca), cert: cert, key: key},
	}
}

// grpcProxy starts levee with app rpc (host rpc.test) on backend over leg,
// with an h2c listener and a TLS one; limits and extra as photosApp's.
func grpcProxy(t *testing.T, backend string, leg grpcLeg, limits, extra string) (p *proxy, h2cAddr, tlsAddr string, pool *tls.Config) {
	t.Helper()
	skipOnH2C(t, "the test sets its own listeners, h2c and TLS")
	cert, key := testcert.PEM(t, "rpc.test")
	certFile, keyFile := t.TempDir()+"/cert.pem", t.TempDir()+"/key.pem"
	writeFile(t, certFile, cert)
	writeFile(t, keyFile, key)
	cfg := fmt.Sprintf("listen:\n  - {addr: 127.0.0.1:0, h2c: true}\n  - {addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}\n",
		certFile, keyFile)
	cfg += fmt.Sprintf("apps:\n  rpc:\n    hosts: [rpc.test]\n    backends: [%s]\n    upstream: %s\n", backend, leg.upstream)
	if limits != "" {
		cfg += "    limits: " + limits + "\n"
	}
	p = startProxy(t, cfg+extra)
	addrs := p.srv.Addrs()
	return p, addrs[0].String(), addrs[1].String(), &tls.Config{RootCAs: testcert.Pool(t, cert), ServerName: "rpc.test"}
}

// grpcClients are a grpc-go client over each of levee's downstream
// protocols: h2c, and h2 over TLS.
func grpcClients(t *testing.T, h2cAddr, tlsAddr string, tc *tls.Config) map[string]*grpc.ClientConn {
	t.Helper()
	out := map[string]*grpc.ClientConn{}
	for name, c := range map[string]struct {
		addr  string
		creds credentials.TransportCredentials
	}{
		"h2c": {h2cAddr, insecure.NewCredentials()},
		"tls": {tlsAddr, credentials.NewTLS(tc)},
	} {
		cc, err := grpc.NewClient("passthrough:///"+c.addr, grpc.WithTransportCredentials(c.creds),
			grpc.WithAuthority("rpc.test"), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		out[name] = cc
	}
	return out
}

// rpcOverH2C is an echo backend over h2c behind a levee whose app has
// upstream and limits (YAML), and a client of it over h2c.
func rpcOverH2C(t *testing.T, upstream, limits string) (*proxy, *echo, *grpc.ClientConn) {
	t.Helper()
	backend, e := grpcBackend(t, nil, nil)
	p, h2cAddr, tlsAddr, tc := grpcProxy(t, backend, grpcLeg{name: "h2c", upstream: upstream}, limits, "")
	return p, e, grpcClients(t, h2cAddr, tlsAddr, tc)["h2c"]
}

func method(name string) string { return "/" + echoService + "/" + name }

// unary calls Echo with msg, returning the reply and its trailer.
func unary(ctx context.Context, cc *grpc.ClientConn, msg []byte) ([]byte, metadata.MD, error) {
	var out []byte
	var tr metadata.MD
	err := cc.Invoke(ctx, method("Echo"), &msg, &out, grpc.Trailer(&tr))
	return out, tr, err
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Unary calls and the three kinds of streaming pass, with their trailers,
// from both downstream protocols to both backend legs.
func TestGRPCPassesThrough(t *testing.T) {
	for _, leg := range grpcLegs(t) {
		t.Run(leg.name, func(t *testing.T) {
			backend, _ := grpcBackend(t, leg.cert, leg.key)
			_, h2cAddr, tlsAddr, tc := grpcProxy(t, backend, leg, "", "")
			for down, cc := range grpcClients(t, h2cAddr, tlsAddr, tc) {
				t.Run(down, func(t *testing.T) {
					ctx := testCtx(t)
					checkUnary(t, ctx, cc)
					checkServerStream(t, ctx, cc)
					checkClientStream(t, ctx, cc)
					checkBidi(t, ctx, cc)
				})
			}
		})
	}
}

func checkUnary(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	out, tr, err := unary(ctx, cc, []byte("hello"))
	if err != nil || string(out) != "hello" || first(tr, "x-echo-len") != "5" {
		t.Fatalf("unary: %q, trailer %v, %v", out, tr, err)
	}
	// A status other than OK comes in the trailers, message and all.
	_, tr, err = unary(ctx, cc, []byte("fail:no such thing"))
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || s.Message() != "no such thing" || first(tr, "x-echo-len") != "18" {
		t.Fatalf("failing unary: %v, trailer %v", err, tr)
	}
	// A large message passes whole.
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	out, _, err = unary(ctx, cc, big)
	if err != nil || !bytes.Equal(out, big) {
		t.Fatalf("4 MiB unary: %d bytes back, %v", len(out), err)
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// serverStream opens a server-streaming call of name and sends it msg.
func serverStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn, name, msg string) grpc.ClientStream {
	t.Helper()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method(name))
	if err != nil {
		t.Fatal(err)
	}
	m := []byte(msg)
	if err := st.SendMsg(&m); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	return st
}

func checkServerStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	st := serverStream(t, ctx, cc, "Count", "50")
	for i := 0; ; i++ {
		var m []byte
		err := st.RecvMsg(&m)
		if err == io.EOF {
			if i != 50 || first(st.Trailer(), "x-count") != "50" {
				t.Fatalf("server stream: %d messages, trailer %v", i, st.Trailer())
			}
			return
		}
		if err != nil || string(m) != strconv.Itoa(i) {
			t.Fatalf("server stream message %d: %q, %v", i, m, err)
		}
	}
}

func checkClientStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, method("Sum"))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		m := bytes.Repeat([]byte("x"), 1000)
		if err := st.SendMsg(&m); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseSend()
	var out []byte
	if err := st.RecvMsg(&out); err != nil || string(out) != "100000" {
		t.Fatalf("client stream: %q, %v", out, err)
	}
}

// Each message comes back before the next is sent: the stream passes
// message by message, never buffered to its end.
func checkBidi(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method("Chat"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		m := []byte(fmt.Sprintf("m%d", i))
		if err := st.SendMsg(&m); err != nil {
			t.Fatal(err)
		}
		var back []byte
		if err := st.RecvMsg(&back); err != nil || !bytes.Equal(back, m) {
			t.Fatalf("bidi message %d: %q, %v", i, back, err)
		}
	}
	st.CloseSend()
	var m []byte
	if err := st.RecvMsg(&m); err != io.EOF {
		t.Fatalf("bidi end: %v, want EOF", err)
	}
}

// errAs is errors.As for a status.
func errCode(err error) codes.Code {
	var s interface{ GRPCStatus() *status.Status }
	if errors.As(err, &s) {
		return s.GRPCStatus().Code()
	}
	return status.Code(err)
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A cancelled call resets its stream both ways: the backend's handler
// sees its context end, and the call's slot is free at once for the next
// call (concurrency 1, no queue). From both downstream protocols.
func TestGRPCCancelReleasesTheSlot(t *testing.T) {
	leg := grpcLegs(t)[0]
	backend, e := grpcBackend(t, nil, nil)
	_, h2cAddr, tlsAddr, tc := grpcProxy(t, backend, leg, "{concurrency: 1, queue: {max_len: 0}}", "")
	for down, cc := range grpcClients(t, h2cAddr, tlsAddr, tc) {
		t.Run(down, func(t *testing.T) {
			ctx := testCtx(t)
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			serverStream(t, callCtx, cc, "Block", "x")
			leaktest.WaitFor(t, 10*time.Second, "the call at the backend", func() bool { return e.blocked.Load() == 1 })
			if _, _, err := unary(ctx, cc, []byte("x")); err == nil {
				t.Fatal("a second call passed while the first held the only slot")
			}
			cancel()
			select {
			case why := <-e.canceled:
				if why != context.Canceled.Error() {
					t.Fatalf("the backend's call ended by %q, want a cancel", why)
				}
			case <-ctx.Done():
				t.Fatal("the backend never saw the cancel")
			}
			leaktest.WaitFor(t, 10*time.Second, "the slot back", func() bool {
				_, _, err := unary(ctx, cc, []byte("x"))
				return err == nil
			})
		})
	}
}

// The balancer picks a backend per call, not per connection: calls on
// one client connection (one HTTP/2 connection to levee) spread over
// every backend.
func TestGRPCCallsSpreadOverBackends(t *testing.T) {
	var addrs []string
	var echoes []*echo
	for range 3 {
		a, e := grpcBackend(t, nil, nil)
		addrs, echoes = append(addrs, a), append(echoes, e)
	}
	// Round robin: a pick per call is then exactly even, whatever the
	// latencies (p2c's picks, per call too, follow them).
	_, h2cAddr, tlsAddr, tc := grpcProxy(t, strings.Join(addrs, ", "), grpcLegs(t)[0], "", "    balance: round_robin\n")
	cc := grpcClients(t, h2cAddr, tlsAddr, tc)["h2c"]
	ctx := testCtx(t)
	call := func(n int) {
		for range n {
			if _, _, err := unary(ctx, cc, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	const calls = 300
	call(calls)
	for i, e := range echoes {
		if n := e.calls.Load(); n != calls/3 {
			t.Errorf("backend %d had %d of %d calls: pinned, not balanced per call", i, n, calls)
		}
	}
}

// Every reason in the one reply table answers a gRPC call with a
// trailers-only 200 whose grpc-status a gRPC client's retry policy reads
// right: RESOURCE_EXHAUSTED for the request's own rate, shape and size,
// UNAVAILABLE (with grpc-retry-pushback-ms from Retry-After's figure)
// for what levee or the backends cannot take now. The reason stays as
// Levee-Reject or Levee-Error, and the recorder keeps the HTTP status
// the refusal stands for (metrics, balancer, adaptive limit).
func TestGRPCRefusalForEveryReason(t *testing.T) {
	want := map[string]int{
		reply.Rate: reply.GRPCResourceExhausted, reply.ClientRate: reply.GRPCResourceExhausted,
		reply.Body: reply.GRPCResourceExhausted, reply.MinRate: reply.GRPCResourceExhausted,
		string(admit.QueueFull): reply.GRPCUnavailable, string(admit.Shed): reply.GRPCUnavailable,
		string(admit.QueueTimeout): reply.GRPCUnavailable, string(admit.ClientShare): reply.GRPCUnavailable,
		string(protect.ReasonShare): reply.GRPCUnavailable, string(protect.ReasonRate): reply.GRPCUnavailable,
		reply.NoBackend: reply.GRPCUnavailable, reply.CatalogBusy: reply.GRPCUnavailable,
		reply.CatalogUnavailable: reply.GRPCUnavailable, reply.BackendTimeout: reply.GRPCUnavailable,
		reply.BackendUnreachable: reply.GRPCUnavailable, reply.Bandwidth: reply.GRPCUnavailable,
		reply.Deadline: reply.GRPCDeadlineExceeded, reply.NoRoute: reply.GRPCUnimplemented,
		reply.BadRequestBody: reply.GRPCInternal,
	}
	reasons := slices.Sorted(maps.Keys(want)) // every row: reply's TestGRPCForEveryRow
	for _, reason := range reasons {
		rep := reply.For(reason)
		if rep == nil {
			t.Errorf("%s is not in the reply table", reason)
			continue
		}
		rec := &limits.Recorder{ResponseWriter: httptest.NewRecorder()}
		ref := limits.Refusal{Code: rep.Status, Reason: reason, RetryAfter: 1500 * time.Millisecond}
		ref.GRPC(rec)
		w := rec.ResponseWriter.(*httptest.ResponseRecorder)
		h := w.Header()
		code, _ := strconv.Atoi(h.Get("Grpc-Status"))
		wantCode, listed := want[reason]
		switch {
		case w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc":
			t.Errorf("%s: %d, %d body bytes, %q; want a trailers-only 200", reason, w.Code, w.Body.Len(), h.Get("Content-Type"))
		case listed && code != wantCode, !listed && code != rep.GRPCCode():
			t.Errorf("%s: grpc-status %d, want %d", reason, code, wantCode)
		case !listed && rep.Header == reply.Reject && rep.Status < 500 && code != reply.GRPCResourceExhausted:
			t.Errorf("%s: a limit of the request's own (%d) is %d, want RESOURCE_EXHAUSTED", reason, rep.Status, code)
		case !listed && rep.Status == 503 && code != reply.GRPCUnavailable:
			t.Errorf("%s: a 503 is %d, want UNAVAILABLE", reason, code)
		case !strings.Contains(h.Get("Grpc-Message"), strings.TrimSpace(strings.TrimPrefix(rep.Body, "levee: "))):
			t.Errorf("%s: grpc-message %q does not say %q", reason, h.Get("Grpc-Message"), rep.Body)
		case h.Get(rep.Header) != reason:
			t.Errorf("%s: %s = %q", reason, rep.Header, h.Get(rep.Header))
		case h.Get("Retry-After") != "2" || h.Get("Grpc-Retry-Pushback-Ms") != "1500":
			t.Errorf("%s: Retry-After %q, pushback %q; want 2 and 1500, one figure", reason, h.Get("Retry-After"), h.Get("Grpc-Retry-Pushback-Ms"))
		case rec.Code != rep.Status:
			t.Errorf("%s: recorded %d, want %d", reason, rec.Code, rep.Status)
		}
	}
	for _, r := range []shape.Reason{shape.HeaderBytes, shape.HeaderCount, shape.URLLength, shape.QueryValues,
		shape.BatchItems, shape.BatchJSON, shape.BatchShape} {
		rec := &limits.Recorder{ResponseWriter: httptest.NewRecorder()}
		limits.ViolationGRPC(rec, &shape.Violation{Reason: r, Status: 422, Msg: string(r) + ": too many"})
		h := rec.Header()
		if h.Get("Grpc-Status") != "8" || h.Get(reply.Reject) != string(r) || h.Get("Grpc-Message") != "levee: rejected: "+string(r)+": too many" ||
			rec.Code != 422 {
			t.Errorf("%s: %v, recorded %d", r, h, rec.Code)
		}
	}
}

// A grpc-go client reads levee's refusals: a rate-limited call gets
// RESOURCE_EXHAUSTED, a call refused by a full queue UNAVAILABLE with
// the pushback and the reason as metadata, and neither reaches the backend.
func TestGRPCClientReadsRefusals(t *testing.T) {
	backend, e := grpcBackend(t, nil, nil)
	for _, down := range []string{"h2c", "tls"} {
		t.Run(down, func(t *testing.T) {
			// A levee each: the rate's burst is the subtest's own.
			_, h2cAddr, tlsAddr, tc := grpcProxy(t, backend, grpcLegs(t)[0], "{concurrency: 1, queue: {max_len: 0}, rate: 1/m, burst: 2}", "")
			cc := grpcClients(t, h2cAddr, tlsAddr, tc)[down]
			ctx := testCtx(t)
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			before := e.calls.Load()
			serverStream(t, callCtx, cc, "Block", "x") // takes the only slot
			leaktest.WaitFor(t, 10*time.Second, "the call at the backend", func() bool { return e.blocked.Load() == 1 })
			_, tr, err := unary(ctx, cc, []byte("x"))
			if s, _ := status.FromError(err); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "queue-full") ||
				first(tr, "levee-reject") != "queue-full" || first(tr, "grpc-retry-pushback-ms") == "" {
				t.Fatalf("queue full: %v, metadata %v; want UNAVAILABLE naming queue-full, with pushback", err, tr)
			}
			_, tr, err = unary(ctx, cc, []byte("x"))
			if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || first(tr, "levee-reject") != reply.Rate {
				t.Fatalf("rate: %v, metadata %v; want RESOURCE_EXHAUSTED, rate", err, tr)
			}
			cancel()
			if n := e.calls.Load() - before; n != 1 {
				t.Fatalf("%d calls reached the backend, want the first only", n)
			}
		})
	}
}

// The backend learns the time a call has left: grpc-timeout, the smaller
// of the client's deadline and the app's upstream.deadline.timeout, less the time
// the call spent in levee; and Levee-Deadline in milliseconds.
func TestGRPCDeadlineIsHandedOn(t *testing.T) {
	_, e, cc := rpcOverH2C(t, "{protocol: h2c, deadline: {timeout: 5s}}", "")
	ctx := testCtx(t)
	for _, c := range []struct {
		client time.Duration
		max    time.Duration
	}{{time.Second, time.Second}, {time.Minute, 5 * time.Second}} {
		cctx, cancel := context.WithTimeout(ctx, c.client)
		serverStream(t, cctx, cc, "Block", "x")
		var md metadata.MD
		select {
		case md = <-e.header:
		case <-ctx.Done():
			t.Fatal("no call at the backend")
		}
		got := time.Duration(e.deadline.Load())
		ms, err := strconv.Atoi(first(md, "levee-deadline"))
		if got <= 0 || got > c.max || err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > c.max {
			t.Errorf("client deadline %v: the backend's is %v, Levee-Deadline %q; want both in (0, %v]", c.client, got, first(md, "levee-deadline"), c.max)
		}
		cancel()
	}
}

// A call whose deadline passes while it waits for a slot is refused with
// DEADLINE_EXCEEDED and never reaches the backend, though the queue would
// have let it wait longer; one whose deadline is already spent is
// refused before it takes a slot.
func TestGRPCDeadlineShorterThanTheQueueIsRefused(t *testing.T) {
	p, e, cc := rpcOverH2C(t, "{protocol: h2c, deadline: {header: X-Timeout}}", "{concurrency: 1, queue: {max_len: 8, max_wait: 30s}}")
	ctx := testCtx(t)
	withTimeout := func(ms string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-timeout", ms) }

	_, tr, err := unary(withTimeout("0"), cc, []byte("x"))
	if s, _ := status.FromError(err); s.Code() != codes.DeadlineExceeded || first(tr, "levee-reject") != reply.Deadline {
		t.Fatalf("a spent deadline: %v, %v; want DEADLINE_EXCEEDED, deadline", err, tr)
	}
	holdCtx, release := context.WithCancel(ctx)
	defer release()
	serverStream(t, holdCtx, cc, "Block", "x")
	leaktest.WaitFor(t, 10*time.Second, "the call at the backend", func() bool { return e.blocked.Load() == 1 })
	before := e.calls.Load()
	_, tr, err = unary(withTimeout("200"), cc, []byte("x"))
	if s, _ := status.FromError(err); s.Code() != codes.DeadlineExceeded || first(tr, "levee-reject") != reply.Deadline {
		t.Fatalf("queued past its deadline: %v, %v; want DEADLINE_EXCEEDED, deadline", err, tr)
	}
	release()
	leaktest.WaitFor(t, 10*time.Second, "the slot back", func() bool {
		_, _, err := unary(ctx, cc, []byte("x"))
		return err == nil
	})
	if n := e.calls.Load() - before; n != 1 {
		t.Fatalf("%d calls reached the backend after the refused one; want 1 (the last)", n)
	}
	if n := p.metric("levee_rejected_total", map[string]string{"app": "rpc", "reason": reply.Deadline}); n != 2 {
		t.Fatalf("levee_rejected_total{reason=deadline} = %v, want 2", n)
	}
}

// Verification is on by default: a backend whose certificate does not
// chain to the configured roots (here, the system's) is not spoken to,
// and the call gets UNAVAILABLE (backend-unreachable) without reaching it.
func TestGRPCBackendCertificateIsVerified(t *testing.T) {
	cert, key := testcert.PEM(t, "backend.test")
	backend, e := grpcBackend(t, cert, key)
	leg := grpcLeg{name: "h2", upstream: "{protocol: h2, tls: {server_name: backend.test}}"}
	_, h2cAddr, tlsAddr, tc := grpcProxy(t, backend, leg, "", "")
	cc := grpcClients(t, h2cAddr, tlsAddr, tc)["h2c"]
	_, tr, err := unary(testCtx(t), cc, []byte("x"))
	if s, _ := status.FromError(err); s.Code() != codes.Unavailable || first(tr, "levee-error") != reply.BackendUnreachable || e.calls.Load() != 0 {
		t.Fatalf("an unverifiable backend: %v, metadata %v, %d calls at it; want UNAVAILABLE, backend-unreachable, none",
			err, tr, e.calls.Load())
	}
}

// A reload that finds the backend CA's file rotated (same name, new
// contents) dials with the new one: a backend that moved to a certificate
// of the new CA is reached, where the pool made with the old file's
// contents would refuse it (the pools are keyed by the files' contents).
func TestGRPCReloadTakesARotatedBackendCA(t *testing.T) {
	skipOnH2C(t, "the test sets its own listener, h2c")
	oldCert, oldKey := testcert.PEM(t, "backend.test")
	newCert, newKey := testcert.PEM(t, "backend.test")
	ca := t.TempDir() + "/ca.pem"
	writeFile(t, ca, oldCert)

	e := &echo{canceled: make(chan string, 16), header: make(chan metadata.MD, 1)}
	old := echoServer(t, e, oldCert, oldKey)
	backend := serveGRPC(t, old, "127.0.0.1:0")

	cfg := fmt.Sprintf("listen:\n  - {addr: 127.0.0.1:0, h2c: true}\n"+
		"apps:\n  rpc:\n    hosts: [rpc.test]\n    backends: [%s]\n"+
		"    upstream: {protocol: h2, tls: {ca: %s, server_name: backend.test}}\n", backend, ca)
	p := startProxy(t, cfg)
	cc := grpcClients(t, p.srv.Addrs()[0].String(), "127.0.0.1:1", nil)["h2c"]
	ctx := testCtx(t)
	if _, _, err := unary(ctx, cc, []byte("x")); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	// The backend moves to a certificate of another CA, at the same
	// address, and the CA file is rewritten with it.
	old.Stop()
	serveGRPC(t, echoServer(t, e, newCert, newKey), backend)
	writeFile(t, ca, newCert)
	if err := p.srv.Reload(mustParse(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if _, tr, err := unary(ctx, cc, []byte("x")); err != nil {
		t.Fatalf("after the rotation and a reload: %v (levee-error %q); want the new CA's backend reached",
			err, first(tr, "levee-error"))
	}
}
