package drill

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

var grpcDrill = &Drill{
	Name: "grpc",
	Incident: "A gRPC service sat behind an edge that refused calls as HTTP statuses: a rate limit reached " +
		"the clients as UNAVAILABLE with no pushback, which their retry policies retried at once, " +
		"multiplying the load the limit was there to cut.",
	Applies: func(o Options) (bool, string) { return need("--grpc-authority", o.GRPCAuthority != "") },
	run:     runGRPC,
}

// The drill's known service is grpc.testing.TestService, the gRPC interop
// service every grpc implementation ships a server of: UnaryCall and
// FullDuplexCall, which echo the metadata grpcEchoTrailer as a trailer.
// The unary method may be another (Options.GRPCMethod): an empty message
// is a valid request of any type, and an Empty reply takes any answer
// (its fields kept as unknown ones).
const grpcEchoTrailer = "x-grpc-test-echo-trailing-bin"

// GRPCSnippet is the levee config of the grpc drill: backend (a server of
// grpc.testing.TestService over h2c) behind three apps, one without limits,
// one rate-limited and one whose two slots and no queue shed the third call.
func GRPCSnippet(authority, rateAuthority, shedAuthority, backend string) string {
	app := func(name, host, limits string) string {
		s := fmt.Sprintf("  %s:\n    hosts: [%s]\n    backends: [%s]\n    upstream: {protocol: h2c}\n", name, host, backend)
		if limits != "" {
			s += "    limits: " + limits + "\n"
		}
		return s
	}
	return "apps:\n" + app("grpc-drill", authority, "") +
		app("grpc-drill-rate", rateAuthority, "{rate: 1/m, burst: 5}") +
		app("grpc-drill-shed", shedAuthority, "{concurrency: 2, queue: {max_len: 0}}")
}

// runGRPC calls the edge with a grpc-go client, one connection per
// authority: a unary and a bidirectional call that must pass with their
// trailers, then calls that must be refused the way a gRPC client's retry
// policy understands.
func runGRPC(ctx context.Context, o Options, r *Report) error {
	roots, err := grpcRoots(o)
	if err != nil {
		return err
	}
	dial := func(authority string) (*grpc.ClientConn, error) {
		creds := grpcCreds(o.Target, authority, roots)
		return grpc.NewClient("passthrough:///"+grpcHostPort(o.Target), grpc.WithTransportCredentials(creds),
			grpc.WithAuthority(authority))
	}
	var conns []*grpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for _, a := range []string{o.GRPCAuthority, o.GRPCRateAuthority, o.GRPCShedAuthority} {
		cc, err := dial(a)
		if err != nil {
			return fmt.Errorf("grpc: %s: %w", a, err)
		}
		conns = append(conns, cc)
	}
	r.Checks = []Check{
		grpcUnaryCheck(ctx, o, conns[0]),
		grpcStreamCheck(ctx, o, testgrpc.NewTestServiceClient(conns[0])),
		gradeRateRefusal(grpcRateProbe(ctx, o, conns[1]), o.GRPCCalls),
		gradeShedRefusal(grpcShedProbe(ctx, o, testgrpc.NewTestServiceClient(conns[2])), o.GRPCHold),
	}
	r.Notes = append(r.Notes, fmt.Sprintf("calls over %s to %s (pass), %s (rate-limited), %s (shed); unary %s, streams %s",
		grpcLeg(o.Target), o.GRPCAuthority, o.GRPCRateAuthority, o.GRPCShedAuthority, o.GRPCMethod,
		testgrpc.TestService_FullDuplexCall_FullMethodName))
	return nil
}

// grpcLeg names the downstream protocol a target means.
func grpcLeg(target string) string {
	if strings.HasPrefix(target, "https://") {
		return "h2 (TLS)"
	}
	return "h2c"
}

// grpcHostPort is the target's host:port, with the scheme's port by default.
func grpcHostPort(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return strings.TrimPrefix(strings.TrimPrefix(target, "https://"), "http://")
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// grpcRoots are the roots that verify an https:// target: GRPCCA's
// certificates, or nil for the system's.
func grpcRoots(o Options) (*x509.CertPool, error) {
	if !strings.HasPrefix(o.Target, "https://") {
		return nil, nil
	}
	return pemRoots("grpc: --grpc-ca", o.GRPCCA)
}

// grpcCreds: h2c for an http:// target; for https://, TLS verified
// against roots with the authority's host as the server name.
func grpcCreds(target, authority string, roots *x509.CertPool) credentials.TransportCredentials {
	if !strings.HasPrefix(target, "https://") {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(&tls.Config{ServerName: hostOnly(authority), RootCAs: roots, NextProtos: []string{"h2"}})
}

func hostOnly(authority string) string {
	if h, _, err := net.SplitHostPort(authority); err == nil {
		return h
	}
	return authority
}

// echoCtx is a call's context: the drill's timeout, and the metadata that
// asks the TestService to echo token as a trailer.
func echoCtx(ctx context.Context, o Options, token string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	return metadata.AppendToOutgoingContext(ctx, grpcEchoTrailer, token), cancel
}

// echoed says whether the trailer carries token back.
func echoed(tr metadata.MD, token string) bool {
	v := tr.Get(grpcEchoTrailer)
	return len(v) == 1 && v[0] == token
}

// grpcFailure describes a failed call by its status (grpc-go's message
// names an HTTP status the edge answered instead of a gRPC one).
func grpcFailure(err error) string {
	s := status.Convert(err)
	return fmt.Sprintf("%s: %s", grpcCode(s.Code()), s.Message())
}

// grpcCode is the status's name in the gRPC spec's form, RESOURCE_EXHAUSTED.
func grpcCode(c grpccodes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

const grpcPayload = 64 // bytes each answer carries

// grpcUnaryCheck calls GRPCMethod: the TestService's UnaryCall must
// answer its payload and echo the trailer; another method (called with an
// empty message, a valid request of any type) need only end OK, its
// status having come in the trailers.
func grpcUnaryCheck(ctx context.Context, o Options, cc *grpc.ClientConn) Check {
	ch := Check{Name: "unary call passes, with trailers", Want: "OK, a 64-byte payload and the echoed trailer"}
	cctx, cancel := echoCtx(ctx, o, "unary")
	defer cancel()
	var tr metadata.MD
	if o.GRPCMethod != testgrpc.TestService_UnaryCall_FullMethodName {
		ch.Want = "OK (" + o.GRPCMethod + " with an empty request)"
		if err := cc.Invoke(cctx, o.GRPCMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Trailer(&tr)); err != nil {
			ch.Got = grpcFailure(err)
		} else {
			ch.Pass, ch.Got = true, "OK"
		}
		return ch
	}
	resp, err := testgrpc.NewTestServiceClient(cc).UnaryCall(cctx, &testgrpc.SimpleRequest{ResponseSize: grpcPayload}, grpc.Trailer(&tr))
	switch {
	case err != nil:
		ch.Got = grpcFailure(err)
	case len(resp.GetPayload().GetBody()) != grpcPayload:
		ch.Got = fmt.Sprintf("OK, but a %d-byte payload", len(resp.GetPayload().GetBody()))
	case !echoed(tr, "unary"):
		ch.Got = fmt.Sprintf("OK, but the trailer %s did not come back (trailers %v)", grpcEchoTrailer, tr)
	default:
		ch.Pass, ch.Got = true, "OK, payload and trailer"
	}
	return ch
}

// grpcStreamCheck sends messages on a bidirectional call one at a time and
// waits for each answer before the next: an edge that buffers a stream to
// its end fails here (by the timeout), as one that drops the trailers does.
func grpcStreamCheck(ctx context.Context, o Options, c testgrpc.TestServiceClient) Check {
	const msgs = 5
	ch := Check{Name: "bidirectional stream passes, with trailers",
		Want: fmt.Sprintf("%d answers, each before the next message, then OK and the echoed trailer", msgs)}
	cctx, cancel := echoCtx(ctx, o, "stream")
	defer cancel()
	st, err := c.FullDuplexCall(cctx)
	if err != nil {
		ch.Got = grpcFailure(err)
		return ch
	}
	for i := range msgs {
		req := &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: grpcPayload}}}
		if err := st.Send(req); err != nil && err != io.EOF {
			ch.Got = fmt.Sprintf("message %d: %v", i, err)
			return ch
		}
		if _, err := st.Recv(); err != nil {
			ch.Got = fmt.Sprintf("answer %d: %s", i, grpcFailure(err))
			return ch
		}
	}
	if err := st.CloseSend(); err != nil {
		ch.Got = fmt.Sprintf("close: %v", err)
		return ch
	}
	if _, err := st.Recv(); err != io.EOF {
		ch.Got = fmt.Sprintf("after %d answers: %s", msgs, grpcFailure(err))
		return ch
	}
	if !echoed(st.Trailer(), "stream") {
		ch.Got = fmt.Sprintf("OK, but the trailer %s did not come back (trailers %v)", grpcEchoTrailer, st.Trailer())
		return ch
	}
	ch.Pass, ch.Got = true, fmt.Sprintf("%d answers, OK, trailer", msgs)
	return ch
}

// grpcRefusal is the first call an edge refused: its status and trailers, and
// how many calls passed before it (Refused false: none was refused).
type grpcRefusal struct {
	Refused bool
	Passed  int
	Status  *status.Status
	Trailer metadata.MD
}

// grpcRateProbe sends up to GRPCCalls unary calls of GRPCMethod (with an
// empty request), 8 at a time, and sends no more once one has failed.
func grpcRateProbe(ctx context.Context, o Options, cc *grpc.ClientConn) grpcRefusal {
	const workers = 8
	var (
		mu     sync.Mutex
		out    grpcRefusal
		issued int
		wg     sync.WaitGroup
	)
	next := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if out.Refused || issued >= o.GRPCCalls {
			return false
		}
		issued++
		return true
	}
	for range workers {
		wg.Go(func() {
			for next() {
				cctx, cancel := context.WithTimeout(ctx, o.Timeout)
				var tr metadata.MD
				err := cc.Invoke(cctx, o.GRPCMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Trailer(&tr))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					out.Passed++
				case !out.Refused:
					out.Refused, out.Status, out.Trailer = true, status.Convert(err), tr
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

func gradeRateRefusal(x grpcRefusal, calls int) Check {
	ch := Check{Name: "rate-limited call gets RESOURCE_EXHAUSTED",
		Want: "RESOURCE_EXHAUSTED (an HTTP 429 or 503 reaches a gRPC client as UNAVAILABLE, which its retry policy retries)"}
	switch {
	case !x.Refused:
		ch.Got = fmt.Sprintf("none of %d calls refused (is --grpc-rate-authority's app rate-limited?)", calls)
	case x.Status.Code() != grpccodes.ResourceExhausted:
		ch.Got = fmt.Sprintf("%d calls passed, then %s: %s", x.Passed, grpcCode(x.Status.Code()), x.Status.Message())
	default:
		ch.Pass, ch.Got = true, fmt.Sprintf("%d calls passed, then RESOURCE_EXHAUSTED: %s", x.Passed, x.Status.Message())
	}
	return ch
}

// grpcShedProbe holds bidirectional calls open, each once its first answer
// has come (so the edge has passed it on and it holds a slot), until one is
// refused or GRPCHold are held; then ends them all. A call neither answered
// nor refused within Timeout ends the probe: the edge queued it.
func grpcShedProbe(ctx context.Context, o Options, c testgrpc.TestServiceClient) grpcRefusal {
	hold, release := context.WithCancel(ctx)
	defer release()
	var out grpcRefusal
	for range o.GRPCHold {
		st, err := c.FullDuplexCall(hold)
		if err == nil {
			err = firstAnswer(st, o.Timeout)
		}
		if err != nil {
			out.Refused, out.Status = true, status.Convert(err)
			if st != nil {
				out.Trailer = st.Trailer()
			}
			return out
		}
		out.Passed++
	}
	return out
}

// firstAnswer asks st for one answer and waits for it at most within.
func firstAnswer(st testgrpc.TestService_FullDuplexCallClient, within time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		err := st.Send(&testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: 1}}})
		if err == nil || err == io.EOF {
			_, err = st.Recv()
		}
		errc <- err
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		// The stream's context ends with the probe, which ends the Recv.
		return status.Errorf(grpccodes.DeadlineExceeded, "neither answered nor refused within %v: the edge queued it", within)
	}
}

func gradeShedRefusal(x grpcRefusal, hold int) Check {
	ch := Check{Name: "shed call gets UNAVAILABLE with grpc-retry-pushback-ms",
		Want: "UNAVAILABLE with grpc-retry-pushback-ms (without it a retry policy's backoff is the client's own guess)"}
	if !x.Refused {
		ch.Got = fmt.Sprintf("%d calls held open, none refused (is --grpc-shed-authority's app's concurrency limited, with no queue?)", hold)
		return ch
	}
	pushback := x.Trailer.Get("grpc-retry-pushback-ms")
	ms, perr := -1, errors.New("absent")
	if len(pushback) == 1 {
		ms, perr = strconv.Atoi(pushback[0])
	}
	got := fmt.Sprintf("with %d calls held, %s: %s", x.Passed, grpcCode(x.Status.Code()), x.Status.Message())
	switch {
	case x.Status.Code() != grpccodes.Unavailable:
		ch.Got = got
	case perr != nil || ms < 0:
		ch.Got = got + "; no grpc-retry-pushback-ms"
	default:
		ch.Pass, ch.Got = true, fmt.Sprintf("%s; pushback %d ms", got, ms)
	}
	return ch
}
