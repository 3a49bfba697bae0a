// Command service reproduces the shape of the outage behind levee's
// admission.Budget, and shows it bounded.
//
// A handler answers a batch request by calling a slow dependency once per
// item. Run unbounded (a goroutine per item, as a handler that forgot
// errgroup.SetLimit does), three concurrent 20,000-item batches from one
// client hold 60,000 goroutines and 60,000 concurrent calls to the
// dependency (in the outage: one connection, one ephemeral port, each), and
// a second client's small requests queue behind them. Run with one
// process-wide admission.Budget, the same load never holds more than the
// budget's task goroutines or calls, and the second client keeps its share.
//
//	go run ./examples/service                 # both modes, one after the other
//	go run ./examples/service -mode bounded -items 20000 -budget 64
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/admission"
)

type config struct {
	mode     string // "unbounded", "bounded" or "both"
	requests int    // concurrent heavy batches from client A
	items    int    // items per heavy batch
	small    int    // client B's requests (one at a time), 10 items each
	budget   int
	latency  time.Duration // the dependency's answer time per call
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "both", "unbounded, bounded or both")
	flag.IntVar(&c.requests, "requests", 3, "concurrent heavy batches from client A")
	flag.IntVar(&c.items, "items", 20000, "items per heavy batch")
	flag.IntVar(&c.small, "small", 20, "client B's small requests (10 items each)")
	flag.IntVar(&c.budget, "budget", 64, "the process-wide budget of concurrent calls")
	flag.DurationVar(&c.latency, "latency", 2*time.Millisecond, "the dependency's time per call")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// result is what one mode measured.
type result struct {
	baseGoroutines int   // before the load: the server's, the client's
	peakGoroutines int64 // runtime.NumGoroutine, sampled at every dependency call
	peakCalls      int64 // concurrent calls to the dependency
	lightWorst     time.Duration
	took           time.Duration
}

func run(ctx context.Context, c config, out io.Writer) error {
	modes := []string{c.mode}
	if c.mode == "both" {
		modes = []string{"unbounded", "bounded"}
	}
	for _, m := range modes {
		r, err := measure(ctx, c, m)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-9s  %d×%d items of A + %d small of B: peak goroutines %d (%d before), peak dependency calls %d, B's slowest request %v, all done in %v\n",
			m, c.requests, c.items, c.small, r.peakGoroutines, r.baseGoroutines, r.peakCalls, r.lightWorst.Round(time.Millisecond), r.took.Round(time.Millisecond))
	}
	return nil
}

// service is the handler under test and its slow dependency.
type service struct {
	budget    *admission.Budget // nil: unbounded
	latency   time.Duration
	calls     atomic.Int64
	peakCalls atomic.Int64
	peakG     atomic.Int64
}

func raise(p *atomic.Int64, n int64) {
	for m := p.Load(); n > m && !p.CompareAndSwap(m, n); m = p.Load() {
	}
}

// call is one call to the dependency: a network round trip in the outage.
func (s *service) call(ctx context.Context) error {
	raise(&s.peakCalls, s.calls.Add(1))
	raise(&s.peakG, int64(runtime.NumGoroutine()))
	defer s.calls.Add(-1)
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP answers a batch of ?items=N by one dependency call per item.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("items"))
	if err != nil || n < 0 {
		http.Error(w, "bad items", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if s.budget == nil { // the outage: a goroutine per item
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { _ = s.call(ctx) })
		}
		wg.Wait()
	} else {
		g := s.budget.Group(ctx, r.Header.Get("X-Client"))
		for range n {
			g.Go(s.call)
		}
		if err := g.Wait(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, n)
}

func measure(ctx context.Context, c config, mode string) (result, error) {
	s := &service{latency: c.latency}
	if mode == "bounded" {
		s.budget = admission.NewBudget(c.budget)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()
	base := "http://" + ln.Addr().String() + "/?items="
	tr := &http.Transport{MaxIdleConnsPerHost: c.requests + 1}
	httpc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	get := func(client string, items int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+strconv.Itoa(items), nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Client", client)
		resp, err := httpc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", client, resp.StatusCode)
		}
		return nil
	}
	var r result
	r.baseGoroutines = runtime.NumGoroutine()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.requests+1)
	for range c.requests {
		wg.Go(func() {
			if err := get("A", c.items); err != nil {
				errs <- err
			}
		})
	}
	wg.Go(func() {
		for range c.small {
			t := time.Now()
			if err := get("B", 10); err != nil {
				errs <- err
				return
			}
			r.lightWorst = max(r.lightWorst, time.Since(t))
		}
	})
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	r.took = time.Since(start)
	r.peakGoroutines, r.peakCalls = s.peakG.Load(), s.peakCalls.Load()
	return r, nil
}
