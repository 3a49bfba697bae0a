// Package drilltest has edges for the drills' tests: a small reverse
// proxy whose reload does what the test says, good or bad, so that a test
// can show a drill pass one edge and fail another.
package drilltest

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EdgeOptions configure an Edge's limits; the zero value has none.
type EdgeOptions struct {
	LimitHost string  // requests to this Host are limited to Limit per second
	Limit     float64 // with a burst of Burst: 429 with Retry-After beyond it
	Burst     int
	ConcHost  string // requests to this Host are limited to Concurrency in flight
	// Concurrency: 503 with Retry-After beyond it
	Concurrency int
}

// Edge is a reverse proxy on loopback with a GCRA rate limit on one host
// and a concurrency limit on another. Its upstream is set with SetUpstream
// (a drill's backend starts after the edge). Test cleanup stops it.
type Edge struct {
	URL  string // http://127.0.0.1:port
	t    testing.TB
	addr string
	opts EdgeOptions
	srv  *http.Server
	to   atomic.Pointer[url.URL]
	lim  atomic.Pointer[gcra]
	sem  atomic.Pointer[chan struct{}]
	mu   sync.Mutex
	ln   net.Listener
	wg   sync.WaitGroup
}

// StartEdge starts an edge with o's limits; it answers 502 until SetUpstream.
func StartEdge(t testing.TB, o EdgeOptions) *Edge {
	t.Helper()
	e := &Edge{t: t, opts: o}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if u := e.to.Load(); u != nil {
				pr.SetURL(u)
			}
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 512},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	e.srv = &http.Server{Handler: e.limits(rp), ErrorLog: log.New(io.Discard, "", 0)}
	e.ResetLimits()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.URL = "http://" + e.addr
	e.serve(ln)
	t.Cleanup(func() { e.srv.Close(); e.wg.Wait() })
	return e
}

// SetUpstream points the edge at addr (host:port).
func (e *Edge) SetUpstream(addr string) { e.to.Store(&url.URL{Scheme: "http", Host: addr}) }

// ResetLimits starts both limits afresh: a full bucket, and a concurrency
// limit that does not count the requests in flight. A reload that does
// this gives the backends a second budget.
func (e *Edge) ResetLimits() {
	if e.opts.Limit > 0 {
		e.lim.Store(newGCRA(e.opts.Limit, e.opts.Burst))
	}
	if e.opts.Concurrency > 0 {
		s := make(chan struct{}, e.opts.Concurrency)
		e.sem.Store(&s)
	}
}

// DropListener closes the listening socket and listens again after
// pause, as an edge that restarts its listener on reload does: new
// connections meanwhile are refused. Open connections are kept.
func (e *Edge) DropListener(pause time.Duration) {
	e.mu.Lock()
	e.ln.Close()
	e.mu.Unlock()
	time.Sleep(pause) // the behaviour under test: nothing listens meanwhile
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		e.t.Errorf("drilltest: listen again: %v", err)
		return
	}
	e.serve(ln)
}

func (e *Edge) serve(ln net.Listener) {
	e.mu.Lock()
	e.ln = ln
	e.mu.Unlock()
	e.wg.Go(func() { _ = e.srv.Serve(ln) })
}

func (e *Edge) limits(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(code int) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(code)
		}
		if l := e.lim.Load(); l != nil && r.Host == e.opts.LimitHost && !l.allow(time.Now()) {
			refuse(http.StatusTooManyRequests)
			return
		}
		if p := e.sem.Load(); p != nil && r.Host == e.opts.ConcHost {
			s := *p // released to the limit it was taken from
			select {
			case s <- struct{}{}:
				defer func() { <-s }()
			default:
				refuse(http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// gcra is a rate limit of rate per second with burst admitted at once
// from a full bucket; a new gcra is full. Safe for concurrent use.
type gcra struct {
	mu       sync.Mutex
	tat      time.Time
	interval time.Duration
	tau      time.Duration
}

func newGCRA(rate float64, burst int) *gcra {
	iv := time.Duration(float64(time.Second) / rate)
	return &gcra{interval: iv, tau: time.Duration(max(burst, 1)-1) * iv}
}

func (g *gcra) allow(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	tat := g.tat
	if tat.Before(now) {
		tat = now
	}
	if tat.Sub(now) > g.tau {
		return false
	}
	g.tat = tat.Add(g.interval)
	return true
}

// ReloadCommand makes a FIFO and returns the shell command that writes a
// line to it: each line read calls reload, in a goroutine that ends with
// the test. The command returns at once, as `nginx -s reload` does.
func ReloadCommand(t testing.TB, reload func()) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reload")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read and write: the open does not wait for a writer, and a read
	// never sees EOF when one command's echo ends.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc := bufio.NewScanner(f); sc.Scan(); {
			reload()
		}
	}()
	t.Cleanup(func() { f.Close(); <-done })
	return "echo reload > " + path
}
