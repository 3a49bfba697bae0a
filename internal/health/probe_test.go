package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
)

// backend is a loopback test server answering code on /healthz.
func backend(t *testing.T, code int, body string) (addr string, conns *atomic.Int64) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if code/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	conns = countConns(srv)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), conns
}

// countConns counts the connections srv (not yet started) accepts.
func countConns(srv *httptest.Server) *atomic.Int64 {
	conns := new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	return conns
}

func TestHTTPProber(t *testing.T) {
	p := NewHTTPProber(time.Second)
	t.Cleanup(p.CloseIdleConnections)
	ctx := context.Background()
	for _, tc := range []struct {
		code int
		body string
		ok   bool
	}{
		{200, "ok", true},
		{204, "", true},
		{302, "", true}, // not followed: /elsewhere would 404
		{404, "", false},
		{500, "boom", false},
		{200, strings.Repeat("x", 64<<10), true}, // body beyond the 4 KiB drain
	} {
		addr, _ := backend(t, tc.code, tc.body)
		err := p.Probe(ctx, addr, "/healthz")
		if (err == nil) != tc.ok {
			t.Errorf("status %d: Probe = %v; want ok %v", tc.code, err, tc.ok)
		}
		var se *StatusError
		if !tc.ok && (!errors.As(err, &se) || se.Code != tc.code) {
			t.Errorf("status %d: error %v; want a *StatusError with that code", tc.code, err)
		}
	}
}

func TestHTTPProberKeepsAlive(t *testing.T) {
	p := NewHTTPProber(time.Second)
	t.Cleanup(p.CloseIdleConnections)
	addr, conns := backend(t, 200, "ok")
	for range 3 {
		if err := p.Probe(context.Background(), addr, "/healthz"); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("3 probes opened %d connections; want 1", n)
	}
}

func TestHTTPProberTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select { // hang until the prober gives up or the test ends
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: unblocks the handler before Close
	p := NewHTTPProber(100 * time.Millisecond)
	t.Cleanup(p.CloseIdleConnections)
	start := time.Now()
	err := p.Probe(context.Background(), srv.Listener.Addr().String(), "/healthz")
	if err == nil {
		t.Fatal("probe of a hanging server succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("probe took %v; want about the 100ms timeout", d)
	}
	// The context's deadline bounds it too.
	p = NewHTTPProber(0)
	t.Cleanup(p.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Probe(ctx, srv.Listener.Addr().String(), "/healthz"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("probe past the context deadline: %v; want DeadlineExceeded", err)
	}
}

func TestHTTPProberRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := NewHTTPProber(time.Second)
	if err := p.Probe(context.Background(), addr, "/healthz"); err == nil {
		t.Error("probe of a closed port succeeded")
	}
}

// TestCheckerWithHTTPProber runs the default prober under a Checker against
// real loopback backends, rounds driven by the fake clock.
func TestCheckerWithHTTPProber(t *testing.T) {
	up, _ := backend(t, 200, "ok")
	down, _ := backend(t, 500, "")
	set := newSetOf(up, down)
	h := startChecker(t, set, Check{}, CheckerOptions{})
	h.round()
	h.round()
	if !set.Backend(0).Healthy(t0) || set.Backend(1).Healthy(t0) {
		t.Errorf("after 3 rounds: healthy %v, %v; want true, false", set.Backend(0).Healthy(t0), set.Backend(1).Healthy(t0))
	}
	for _, st := range h.c.Status() {
		var se *StatusError
		if st.ID == down && (!errors.As(st.LastError, &se) || se.Code != 500 || st.Failures != 3) {
			t.Errorf("Status of the 500 backend: %+v; want 3 failures, a *StatusError 500", st)
		}
		if st.ID == up && (st.LastError != nil || st.Successes != 3) {
			t.Errorf("Status of the 200 backend: %+v; want 3 successes", st)
		}
	}
}

func newSetOf(ids ...string) *balance.Set {
	specs := make([]balance.Spec, len(ids))
	for i, id := range ids {
		specs[i] = balance.Spec{ID: id}
	}
	return balance.NewSet(specs, nil, t0)
}
