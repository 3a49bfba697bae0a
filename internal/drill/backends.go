package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// backendHeader names the drill backend that answered.
const backendHeader = "Drill-Backend"

// Backend is a drill's own backend on loopback: it counts the requests it
// gets and can be made slow, so a drill knows the truth behind the edge.
type Backend struct {
	Name  string
	Addr  string
	Delay atomic.Int64 // added to every answer, in nanoseconds
	count atomic.Int64
	srv   *http.Server
	done  chan struct{}
}

// StartBackends starts n backends on loopback: on port first+i when first is
// set (so an edge can be configured before the drill runs), else on any
// free port. On error none is left running.
func StartBackends(n, first int) ([]*Backend, error) {
	var out []*Backend
	for i := range n {
		addr := "127.0.0.1:0"
		if first > 0 {
			addr = fmt.Sprintf("127.0.0.1:%d", first+i)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			CloseBackends(out)
			return nil, fmt.Errorf("drill: backend %d: %w", i+1, err)
		}
		b := &Backend{Name: fmt.Sprintf("b%d", i+1), Addr: ln.Addr().String(), done: make(chan struct{})}
		b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
		go func() { defer close(b.done); _ = b.srv.Serve(ln) }()
		out = append(out, b)
	}
	return out, nil
}

// CloseBackends stops the backends and waits for their servers to return.
func CloseBackends(bs []*Backend) {
	for _, b := range bs {
		_ = b.srv.Close()
		<-b.done
	}
}

// Count is the requests this backend has answered since the last Reset.
func (b *Backend) Count() int64 { return b.count.Load() }

// Reset zeroes the count (after the drill's readiness probes).
func (b *Backend) Reset() { b.count.Store(0) }

func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
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
func Snippet(host string, bs []*Backend) string {
	addrs := make([]string, len(bs))
	for i, b := range bs {
		addrs[i] = b.Addr
	}
	return fmt.Sprintf("apps:\n  drill:\n    hosts: [%s]\n    backends: [%s]\n", host, strings.Join(addrs, ", "))
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
