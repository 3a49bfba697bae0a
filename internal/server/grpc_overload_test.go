package server

// Issue 21's overload: a grpc-go client whose retry policy retries
// UNAVAILABLE, with retryThrottling, offers five times what the app's
// concurrency limit admits. levee's refusals carry grpc-retry-pushback-ms,
// so the client's retries neither come at once nor multiply the load; and
// the deadline levee hands on lets the backend drop calls it could not
// finish for a waiting client.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/leveeproxy/levee/internal/admit"
)

// worker is a backend of fixed cost per call, which counts what its work
// was for. It looks at the call's context when it starts (a call whose
// client is gone, or whose deadline leaves no time for the work, is
// dropped: no work) and when it finishes (work whose client is gone by
// then was wasted).
type worker struct {
	cost                    time.Duration
	dropped, served, wasted atomic.Int64
}

const workService = "test.Work"

func (w *worker) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: workService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Do", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			// Twice the cost: room for a busy machine's scheduling.
			if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < 2*w.cost {
				w.dropped.Add(1)
				return nil, status.Error(codes.DeadlineExceeded, "no time left for the work")
			}
			time.Sleep(w.cost) // the work: it does not stop for a cancel, as CPU-bound work would not
			if ctx.Err() != nil {
				w.wasted.Add(1)
			} else {
				w.served.Add(1)
			}
			return &in, nil
		}}},
	}
}

// attempts counts a client's attempts (each try of a call, retries
// included, begins once) and, per call (callKey in its context), when
// each began.
type attempts struct {
	n     atomic.Int64
	mu    sync.Mutex
	began map[int][]time.Time
}

type callKey struct{}

func (a *attempts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (a *attempts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	b, ok := s.(*stats.Begin)
	if !ok || !b.Client {
		return
	}
	a.n.Add(1)
	if id, ok := ctx.Value(callKey{}).(int); ok {
		a.mu.Lock()
		a.began[id] = append(a.began[id], b.BeginTime)
		a.mu.Unlock()
	}
}

// hasty counts the retries that began sooner than pushback after the
// attempt before them.
func (a *attempts) hasty(pushback time.Duration) (retries, hasty int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ts := range a.began {
		for i := 1; i < len(ts); i++ {
			retries++
			if ts[i].Sub(ts[i-1]) < pushback {
				hasty++
			}
		}
	}
	return retries, hasty
}
func (a *attempts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (a *attempts) HandleConn(context.Context, stats.ConnStats)                       {}

// The retry policy of gRFC A6's example, retrying UNAVAILABLE, and
// retryThrottling: each failed attempt takes a token of 10, each success
// gives 0.1 back, and below 5 tokens no call is retried.
const retryingServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "test.Work"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

// Five times what the app admits (2 slots of 50 ms: 40 calls a second),
// offered open loop: a call is due every 5 ms whatever became of the
// earlier ones, 400 in all, with deadlines from 0.1 s to 1.5 s. No retry
// comes sooner than the pushback (1 s, Retry-After's figure: without it
// they come at the policy's backoff of 0.1 s), and with the throttle the
// attempts stay within 1.25 per call (1.00 to 1.01 measured; without the
// throttle, 1.65: the load grew). The backend wastes under 2% of its work
// on calls whose client is gone (none measured; a backend that ignores the
// deadline it is handed wastes 12%). The bounds are counts: a slower
// machine offers less than 5x and refuses less, and the test requires only
// that it stays an overload (at least 40% refused).
func TestGRPCOverloadDoesNotGrowTheLoad(t *testing.T) {
	const (
		slots = 2
		cost  = 50 * time.Millisecond
		calls = 400
		every = cost / slots / 5 // 5x capacity
	)
	// Clients of every patience, from those that leave before a slot
	// could be theirs to those who wait out a retry.
	deadlines := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond,
		1000 * time.Millisecond, 1500 * time.Millisecond}
	w := &worker{cost: cost}
	backend := grpcServe(t, w.desc())
	_, h2cAddr, _, _ := grpcProxy(t, backend, grpcLegs(t)[0], "{concurrency: 2, queue: {max_len: 4, max_wait: 1s}}", "")
	tries := attempts{began: map[int][]time.Time{}}
	cc, err := grpc.NewClient("passthrough:///"+h2cAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("rpc.test"), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
		grpc.WithDefaultServiceConfig(retryingServiceConfig), grpc.WithStatsHandler(&tries))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx := testCtx(t)

	var (
		mu   sync.Mutex
		ends = map[codes.Code]int{}
		wg   sync.WaitGroup
	)
	start := time.Now()
	for i := range calls {
		// Open loop: pacing the arrivals, not ordering goroutines.
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(context.WithValue(ctx, callKey{}, i), deadlines[i%len(deadlines)])
			defer cancel()
			in, out := []byte("x"), []byte(nil)
			err := cc.Invoke(cctx, "/"+workService+"/Do", &in, &out)
			mu.Lock()
			ends[status.Code(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()

	n := tries.n.Load()
	served, wasted, dropped := w.served.Load(), w.wasted.Load(), w.dropped.Load()
	t.Logf("%d calls: %v; %d attempts; backend served %d, wasted %d, dropped %d", calls, ends, n, served, wasted, dropped)
	ok := ends[codes.OK]
	if refused := calls - ok; refused < calls*2/5 || ok == 0 {
		t.Fatalf("%d of %d calls refused, %d passed: not an overload of a working backend", refused, calls, ok)
	}
	if retries, hasty := tries.hasty(admit.RetryAfterBusy); hasty > 0 {
		t.Errorf("%d of %d retries came sooner than the pushback of %v", hasty, retries, admit.RetryAfterBusy)
	}
	if n > calls*5/4 {
		t.Errorf("%d attempts for %d calls (%.2f each); want at most 1.25 each: the retries grew the load", n, calls, float64(n)/calls)
	}
	if served == 0 || float64(wasted) >= 0.02*float64(served) {
		t.Errorf("the backend wasted %d calls' work on clients gone, against %d served; want under 2%%", wasted, served)
	}
}

// grpcServe starts a grpc-go server of desc (the raw codec) over h2c.
func grpcServe(t *testing.T, desc *grpc.ServiceDesc) string {
	t.Helper()
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	s.RegisterService(desc, struct{}{})
	return serveGRPC(t, s, "127.0.0.1:0")
}
