//go:build !race

// The soak measures goroutines, files and heap: under -race those mean
// little and it runs ~10x slower, so it is built only without it, and CI
// runs it in its step for such files (.ci/run).

package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/drill"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// The short soak: bench/soak.sh's run (issue 24 point 5) at CI's scale, in
// process. levee on its default limits, but for a concurrency (256) below
// the client's connections, in front of a backend of fixed capacity,
// offered five times that capacity, open loop, on each engine:
// every request must get an answer, 200 or a refusal that says so, and
// what the process holds must be the same after two equal rounds of load.
// Under load the goroutines and connections in flight vary by hundreds
// from one moment to the next, so the process is measured between rounds,
// once the client's connections are closed and levee is idle: what is left
// then is the pools', and a goroutine, file or buffer leaked per request
// (tens of thousands a round) shows above any noise.
const (
	soakSlots    = 4 // the backend's capacity: 4 x 10 ms = 400 req/s
	soakService  = 10 * time.Millisecond
	soakOverload = 5
	// soakLimit is the app's concurrency: below soakConns, so that levee
	// queues and refuses (the default, 1,024, would pass every request on
	// to wait at the backend).
	soakLimit    = 256
	soakWarmUp   = 3 * time.Second // pools, buffers and caches fill
	soakRoundFor = 6 * time.Second // each of the two rounds compared
	// soakConns bounds the client's connections and requests in flight:
	// well above what levee holds at once (soakLimit admitted, refusals within
	// the queue's 50 ms), so that the client sends every request unless
	// the machine is short of CPU.
	soakConns = 1024
	// soakTimeout only catches a request that got no answer: an admitted
	// one waits soakLimit/400 s at the backend.
	soakTimeout = 10 * time.Second
	// soakTolerance and soakSlack are how much the second round may leave
	// above the first and still be flat: bench/soak.sh's 10%, and floors
	// for noise (its own for goroutines and files; for the live heap,
	// less than its 8 MiB of RSS: rounds leave 5-7 MiB, within 0.5 MiB).
	soakTolerance = 0.10
)

var soakSlack = leaktest.Usage{Goroutines: 50, Files: 50, Heap: 4 << 20}

// soakIdle are goroutines a sample does not count: fasthttp keeps a
// worker per connection of the last seconds idle for up to 10 s
// (MaxIdleWorkerDuration), as many as the client happened to open. Busy
// ones would hold a connection, which the files count.
var soakIdle = []string{"github.com/valyala/fasthttp.(*workerPool).workerFunc"}

func TestSoakOverloadStaysFlat(t *testing.T) {
	skipOnH2C(t, "the test runs each engine itself")
	for _, eng := range []struct {
		name, listen string
		protocols    *http.Protocols
	}{
		{"http1", "listen: 127.0.0.1:0\n", http1Only()},
		{"h2c", "listen: [{addr: 127.0.0.1:0, h2c: true}]\n", h2cOnly()},
	} {
		t.Run(eng.name, func(t *testing.T) {
			leaktest.Check(t)
			leaktest.CheckFiles(t)
			be, err := drill.StartPool(soakSlots, soakService, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { drill.CloseBackends([]*drill.Backend{be}) })
			p := startProxy(t, eng.listen+photosApp(be.Addr, fmt.Sprintf("{concurrency: %d}", soakLimit), ""))
			client := drill.NewHTTPDoer(p.URL, soakConns)
			client.Client.Transport.(*http.Transport).Protocols = eng.protocols
			t.Cleanup(client.Close)

			var after []leaktest.Usage // each round's
			var results []*drill.Result
			for _, d := range []time.Duration{soakWarmUp, soakRoundFor, soakRoundFor} {
				res := runSoakRound(t, client, d)
				results = append(results, res)
				t.Logf("%v at %.0f/s: %d answered 200, %d refused %v, %d not sent", d, res.OfferedRate(), res.OK,
					res.Non2xx, res.Reasons, res.Overflow)
				waitFor(t, "no slot, buffer or backend connection held after the load", func() bool {
					return p.metric("levee_inflight", map[string]string{"app": "photos"}) == 0 &&
						p.metric("levee_buffer_bytes", nil) == 0 &&
						p.metric("levee_backend_conns", map[string]string{"state": "active"}) == 0
				})
				client.Close()
				after = append(after, settledSample(t))
			}
			t.Logf("goroutines, files, heap after each round: %+v", after)
			for i, res := range results {
				// A request due while soakConns were in flight was not
				// sent (the process short of CPU: levee never saw it, and
				// how fast it answers is not this test's to judge); every
				// request sent must have its answer.
				if n := res.Timeouts + res.Errors; n > 0 {
					t.Errorf("round %d: %d of %d requests sent got no answer (%d timed out, %d failed)",
						i, n, res.Sent, res.Timeouts, res.Errors)
				}
				var refused int64
				for _, n := range res.Reasons {
					refused += n
				}
				if res.Non2xx != refused {
					t.Errorf("round %d: %d answers were not 200, and only %d of them refusals with Levee-Reject: %v",
						i, res.Non2xx, refused, res.Codes())
				}
				if res.OK == 0 || refused == 0 {
					t.Errorf("round %d: %d served and %d refused; want both: the soak must overload levee, not starve it",
						i, res.OK, refused)
				}
			}
			if err := leaktest.Growth(after[1:2], after[2:], soakTolerance, soakSlack); err != nil {
				t.Error(err)
			}
		})
	}
}

// runSoakRound offers the backend's capacity times soakOverload through
// client for d, open loop, and returns when every request has finished.
func runSoakRound(t *testing.T, client *drill.HTTPDoer, d time.Duration) *drill.Result {
	t.Helper()
	sched, err := drill.Constant(soakOverload*soakSlots/soakService.Seconds(), d, 0)
	if err != nil {
		t.Fatal(err)
	}
	plan := drill.Plan{Name: "soak", Schedule: sched, MaxInFlight: soakConns, Timeout: soakTimeout,
		Make: func(int64) drill.Request { return drill.Request{Path: "/", Host: "photos.test"} }}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*soakTimeout)
	defer cancel()
	return drill.Run(ctx, nil, plan, client, nil)
}

// settledSample samples the process until two samples in a row agree on
// goroutines and files (connections just closed take a moment to end on
// both sides), or leaktest.Wait passes, and returns the last.
func settledSample(t *testing.T) leaktest.Usage {
	t.Helper()
	deadline := time.Now().Add(leaktest.Wait)
	last := leaktest.Sample(soakIdle...)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		u := leaktest.Sample(soakIdle...)
		if u.Goroutines == last.Goroutines && u.Files == last.Files {
			return u
		}
		last = u
	}
	t.Logf("the process did not settle within %v: last %+v", leaktest.Wait, last)
	return last
}
