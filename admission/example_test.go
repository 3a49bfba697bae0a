package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/admission"
)

// A handler fans out one call per item; the process-wide budget bounds the
// calls of every request together, and Go blocks rather than parking a
// goroutine per item.
func ExampleBudget() {
	budget := admission.NewBudget(64) // one per process

	items := make([]int, 20000)
	var sum atomic.Int64
	g := budget.Group(context.Background(), "client-a")
	for i := range items {
		g.Go(func(ctx context.Context) error {
			sum.Add(int64(i % 2)) // a call to a dependency
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println("fan-out failed:", err)
		return
	}
	fmt.Println(sum.Load(), "calls answered 1; at most", budget.Limit(), "ran at once")
	// Output: 10000 calls answered 1; at most 64 ran at once
}

// The first error cancels the group: the rest of the loop runs nothing, and
// Wait returns that error.
func ExampleGroup_Wait() {
	budget := admission.NewBudget(4)
	g := budget.Group(context.Background(), "client-a")
	errDown := errors.New("dependency down")
	g.Go(func(ctx context.Context) error { return errDown })
	fmt.Println(g.Wait() == errDown)
	// Output: true
}

// WithMaxItems and Expect refuse a batch that is too large before any of
// it runs, with the reason levee gives for a batch over limits.batch.
func ExampleWithMaxItems() {
	budget := admission.NewBudget(64)
	g := budget.Group(context.Background(), "client-a", admission.WithMaxItems(1000))
	var rej *admission.Rejection
	if err := g.Expect(20000); errors.As(err, &rej) {
		fmt.Println("refused:", rej.Reason) // answer 422 Levee-Reject: batch-items
	}
	_ = g.Wait()
	// Output: refused: batch-items
}

// WithGroupLimit caps one request below the budget, as errgroup.SetLimit
// does, while the budget still bounds every request together.
func ExampleWithGroupLimit() {
	budget := admission.NewBudget(64)
	g := budget.Group(context.Background(), "client-a", admission.WithGroupLimit(8))
	var running, peak atomic.Int64
	for range 1000 {
		g.Go(func(ctx context.Context) error {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			running.Add(-1)
			return nil
		})
	}
	_ = g.Wait()
	fmt.Println(peak.Load() <= 8)
	// Output: true
}

// Limits are Go values: a zero field is levee's default for it.
func ExampleGate_Wrap() {
	gate, err := admission.NewGate(admission.Limits{
		Concurrency: 64,
		Queue:       admission.Queue{MaxLen: 128, MaxWait: 2 * time.Second},
		Rate:        admission.PerSecond(500),
		Client:      admission.Client{Key: "header:X-Api-Key", Rate: admission.PerSecond(20)},
		Body:        1 << 20,
	})
	if err != nil {
		log.Fatal(err) // e.g. limits.client.key: must be ip or header:NAME
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	srv := httptest.NewServer(gate.Wrap(mux))
	defer srv.Close()

	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", 2_000_000)))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Levee-Reject"))
	// Output: 413 body
}

// The same limits as levee's config writes them, from a file the proxy
// and the service share, say.
func ExampleParseLimits() {
	l, err := admission.ParseLimits([]byte(`
concurrency: 64
queue: {max_len: 128, max_wait: 2s}
rate: 500/s
client: {key: "header:X-Api-Key", rate: 20/s}
body: 1MB
`))
	if err != nil {
		log.Fatal(err) // each error names its field: limits.rate: ...
	}
	fmt.Println(l.Concurrency, l.Queue.MaxWait, l.Rate.Events, l.Body)
	// Output: 64 2s 500 1000000
}

// A gate in front of a batch endpoint, as the outage's handler needed: the
// batch is counted as the handler reads it, and a client's 20,000 items are
// refused with levee's 422 before the handler fans out one of them.
func ExampleGate() {
	gate, err := admission.NewGate(admission.Limits{
		Concurrency: 32,
		Batch:       admission.Batch{JSONField: "items", Max: 1000},
		Client:      admission.Client{Key: "header:X-Api-Key"},
	})
	if err != nil {
		log.Fatal(err)
	}
	batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Items []int }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return // the gate answers a refused body; any other error is ours to answer
		}
		fmt.Fprintf(w, "%d items\n", len(req.Items))
	})
	srv := httptest.NewServer(gate.Wrap(batch))
	defer srv.Close()

	items := strings.Repeat("1,", 19_999) + "1"
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"items": [`+items+`]}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Levee-Reject"))
	fmt.Println(gate.Stats().Rejected[admission.BatchItems])
	// Output:
	// 422 batch-items
	// 1
}

// The heaviest clients, as levee's admin API reports an app's.
func ExampleGate_Top() {
	gate, err := admission.NewGate(admission.Limits{Client: admission.Client{Key: "header:X-Api-Key", TopK: 16}})
	if err != nil {
		log.Fatal(err)
	}
	h := gate.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 10 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Api-Key", []string{"tenant-a", "tenant-b"}[min(i%4, 1)])
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	top, err := gate.Top(admission.ByRequests, admission.Last10s)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range top.Clients {
		fmt.Println(c.Client, c.Count)
	}
	// Output:
	// tenant-b 7
	// tenant-a 3
}
