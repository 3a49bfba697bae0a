package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// backendHeader names the drill backend that answered.
const backendHeader = "Drill-Backend"

// Backend is a drill's own backend on loopback: it counts the requests it
// gets and can be made slow, or given a fixed capacity (StartPool), so a
// drill knows the truth behind the edge. Safe for concurrent use.
type Backend struct {
	Name  string
	Addr  string
	Delay atomic.Int64 // added to every answer, in nanoseconds
	count atomic.Int64
	pool  *pool  // nil: no capacity limit
	meter *meter // nil: no per-host arrivals or in-flight count
	srv   *http.Server
	done  chan struct{} // closed when Serve has returned
	quit  chan struct{} // closed by CloseBackends: requests waiting on the pool give up
}

// StartBackends starts n backends on loopback: on port first+i when first is
// set (so an edge can be configured before the drill runs), else on any
// free port. On error none is left running.
func StartBackends(n, first int) ([]*Backend, error) {
	var out []*Backend
	for i := range n {
		port := 0
		if first > 0 {
			port = first + i
		}
		b, err := startBackend(fmt.Sprintf("b%d", i+1), port, nil, nil)
		if err != nil {
			CloseBackends(out)
			return nil, fmt.Errorf("drill: backend %d: %w", i+1, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// StartPool starts one backend of fixed capacity on loopback (port 0: any
// free port), like bench/backend -capacity: at most slots requests are
// served at once, each holding its slot for service, so it answers at most
// slots/service requests per second. A request beyond the slots waits for
// one, without limit and in arrival order, and is served when its turn comes
// even if its client has gone away: a thread pool does not notice, which is
// what makes an edge that forwards everything collapse in front of it.
func StartPool(slots int, service time.Duration, port int) (*Backend, error) {
	if slots < 1 || service <= 0 {
		return nil, fmt.Errorf("drill: a backend pool needs slots >= 1 and a service time > 0 (got %d, %v)", slots, service)
	}
	b, err := startBackend("pool", port, &pool{slots: make(chan struct{}, slots), service: service}, nil)
	if err != nil {
		return nil, fmt.Errorf("drill: backend: %w", err)
	}
	return b, nil
}

func startBackend(name string, port int, p *pool, m *meter) (*Backend, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	b := &Backend{Name: name, Addr: ln.Addr().String(), pool: p, meter: m, done: make(chan struct{}), quit: make(chan struct{})}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(b.done); _ = b.srv.Serve(ln) }()
	return b, nil
}

// closeWait bounds how long CloseBackends waits for requests to finish
// before it cuts their connections.
const closeWait = 5 * time.Second

// CloseBackends stops the backends and waits for their servers and their
// requests to return: requests still waiting for a pool's slot give up.
func CloseBackends(bs []*Backend) {
	for _, b := range bs {
		close(b.quit)
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		_ = b.srv.Shutdown(ctx)
		cancel()
		_ = b.srv.Close()
		<-b.done
	}
}

// Count is the requests this backend has answered since the last Reset
// (with a pool: served, whether or not the client still waited).
func (b *Backend) Count() int64 { return b.count.Load() }

// Reset zeroes the count (after the drill's readiness probes), and a
// pool's peak of waiting requests.
func (b *Backend) Reset() {
	b.count.Store(0)
	if b.pool != nil {
		b.pool.peak.Store(b.pool.waiting.Load())
	}
}

// PeakWaiting is the most requests that waited at once for a pool's slot
// since the last Reset; 0 without a pool.
func (b *Backend) PeakWaiting() int64 {
	if b.pool == nil {
		return 0
	}
	return b.pool.peak.Load()
}

// pool is a backend's fixed set of slots.
type pool struct {
	slots         chan struct{} // a buffered channel as a semaphore: blocked senders are woken in arrival order
	service       time.Duration
	waiting, peak atomic.Int64
}

// hold takes a slot, however long that takes, and keeps it for the service
// time, ignoring the client (see StartPool). It reports false only if quit
// closed first.
func (p *pool) hold(quit <-chan struct{}) bool {
	w := p.waiting.Add(1)
	for m := p.peak.Load(); w > m && !p.peak.CompareAndSwap(m, w); m = p.peak.Load() {
	}
	select {
	case p.slots <- struct{}{}:
		p.waiting.Add(-1)
	case <-quit:
		p.waiting.Add(-1)
		return false
	}
	defer func() { <-p.slots }()
	t := time.NewTimer(p.service)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-quit:
		return false
	}
}

func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	if b.meter != nil {
		defer b.meter.arrive(r.Host)()
		if !b.meter.hold(r.Context(), b.quit) {
			return
		}
	}
	if q := r.URL.Query().Get("bytes"); q != "" {
		b.large(w, q)
		return
	}
	if b.pool != nil && !b.pool.hold(b.quit) {
		w.WriteHeader(http.StatusServiceUnavailable) // the drill is over
		return
	}
	if d := time.Duration(b.Delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	b.count.Add(1)
	w.Header().Set(backendHeader, b.Name)
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s\n", b.Name)
}

// Snippet is the levee config that points app host at the backends.
func Snippet(host string, bs []*Backend) string { return appSnippet("drill", host, bs) }

// appSnippet is the levee config of app name: host, the backends, default limits.
func appSnippet(name, host string, bs []*Backend) string {
	addrs := make([]string, len(bs))
	for i, b := range bs {
		addrs[i] = b.Addr
	}
	return fmt.Sprintf("apps:\n  %s:\n    hosts: [%s]\n    backends: [%s]\n", name, host, strings.Join(addrs, ", "))
}

// pointEdge prints lead and the levee config snippet that routes host to
// bs (o.Log), hands both to o.OnBackends, and waits up to o.RouteWait for
// the edge to route host to them.
func pointEdge(ctx context.Context, o Options, lead, host, snippet string, bs []*Backend) error {
	fmt.Fprintf(o.Log, "%s, e.g. for levee:\n%s", lead, snippet)
	if o.OnBackends != nil {
		if err := o.OnBackends(snippet, bs); err != nil {
			return err
		}
	}
	probe := NewHTTPDoer(o.Target, 1)
	defer probe.Close()
	return waitRouted(ctx, probe, host, bs, o.RouteWait)
}

// waitRouted polls the edge until one of the backends has answered through
// it, so a user can start the drill first and point the edge at it after.
func waitRouted(ctx context.Context, d Doer, host string, bs []*Backend, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		r := d.Do(rctx, &Request{Path: "/", Host: host})
		rcancel()
		for _, b := range bs {
			if b.Count() > 0 && r.Err == nil && r.Status < 300 {
				return nil
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.New("the edge did not route to the drill's backends in time (is the config snippet loaded?)")
		}
	}
}

// maxLarge bounds the body a backend sends for ?bytes=N.
const maxLarge = 64 << 20

// large answers ?bytes=N with a body of N bytes (slow-read's response).
// Closing the backends ends a write that a slow reader holds up.
func (b *Backend) large(w http.ResponseWriter, q string) {
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n < 0 || n > maxLarge {
		http.Error(w, fmt.Sprintf("bytes: want 0..%d", maxLarge), http.StatusBadRequest)
		return
	}
	b.count.Add(1)
	w.Header().Set(backendHeader, b.Name)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	rc := http.NewResponseController(w)
	written := make(chan struct{})
	defer close(written)
	go func() {
		select {
		case <-b.quit:
			_ = rc.SetWriteDeadline(time.Now())
		case <-written:
		}
	}()
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for n > 0 {
		k := min(n, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}
