// Command backend is a tiny, fast HTTP/1.1 origin used by levee's benchmarks;
// with -h2c it also speaks HTTP/2 over cleartext (prior knowledge) on the same
// port, for a proxy's HTTP/2 leg to backends.
//
// Every request, whatever its method or path, is answered with status 200 and
// the same fixed 100-byte body (Content-Length: 100). An optional -delay holds
// each response for a fixed time, for overload benchmarks.
//
// With -capacity N (N > 0) the backend behaves like a fixed-size worker pool:
// at most N requests are served at once, each holding its slot for -delay
// (a timer, not a busy loop), so its capacity is N / delay requests per
// second. Requests beyond N wait, without limit and in arrival order, for a
// slot, and a request whose client has gone away is still served when its
// turn comes (a thread pool does not notice) — which is what makes an
// unprotected proxy in front of it collapse under overload. -capacity 0 (the
// default) keeps the original behaviour: no limit, and a client that leaves
// during -delay ends its request early.
//
// With -count, GET /__count answers (at once, without -delay or a slot) the
// number of other requests answered so far, as a decimal line; the
// distribution benchmark reads it before and after each run. /__count
// requests are not counted. Without -count, /__count is an ordinary request.
// With -count, GET /__conns answers likewise the connections accepted so far:
// the matrix benchmark reads it around each run for the dials per 1,000
// requests each proxy makes.
//
//	go build -o backend ./bench/backend
//	GOMAXPROCS=1 ./backend -listen 127.0.0.1:9101 [-delay 5ms] [-capacity 32] [-count] [-h2c]
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// bodySize is the fixed response body length in bytes.
const bodySize = 100

func main() {
	listen := flag.String("listen", "127.0.0.1:9101", "address to listen on (host:port)")
	delay := flag.Duration("delay", 0, "fixed delay before each response (e.g. 5ms); 0 = none")
	capacity := flag.Int("capacity", 0, "serve at most this many requests at once, each for -delay; excess requests wait for a slot (0 = no limit)")
	stats := flag.Bool("stats", false, "with -capacity: log once a second the requests served and the most that waited for a slot")
	count := flag.Bool("count", false, "serve GET /__count: the number of requests answered so far (not counting /__count)")
	h2c := flag.Bool("h2c", false, "also serve HTTP/2 over cleartext (prior knowledge) on the same port")
	flag.Parse()
	if *capacity < 0 {
		log.Fatalf("backend: -capacity must be >= 0 (got %d)", *capacity)
	}
	// slots is the worker pool of -capacity mode: a buffered channel used as
	// a FIFO-ish semaphore (Go wakes blocked senders in arrival order).
	var slots chan struct{}
	if *capacity > 0 {
		slots = make(chan struct{}, *capacity)
	}
	var waiting, maxWaiting atomic.Int64 // requests (beyond capacity) waiting for a slot
	var served atomic.Uint64
	var answered atomic.Uint64 // every answered request except /__count, for -count
	var accepted atomic.Uint64 // connections accepted, for -count
	if *stats && slots != nil {
		go func() {
			for range time.Tick(time.Second) {
				log.Printf("backend: served %d/s, waiting now %d, most waiting %d", served.Swap(0), waiting.Load(), maxWaiting.Swap(waiting.Load()))
			}
		}()
	}

	body := make([]byte, bodySize)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	body[bodySize-1] = '\n'
	contentLength := []string{strconv.Itoa(bodySize)}
	contentType := []string{"text/plain; charset=utf-8"}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *count && r.URL.Path == "/__count" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(strconv.FormatUint(answered.Load(), 10) + "\n"))
			return
		}
		if *count && r.URL.Path == "/__conns" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(strconv.FormatUint(accepted.Load(), 10) + "\n"))
			return
		}
		// Drain any request body so the connection can be reused.
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		if slots != nil {
			// Fixed-capacity mode: wait for a worker, however long, then hold
			// it for -delay whether or not the client is still there.
			w := waiting.Add(1)
			for m := maxWaiting.Load(); w > m && !maxWaiting.CompareAndSwap(m, w); m = maxWaiting.Load() {
			}
			slots <- struct{}{}
			waiting.Add(-1)
			if *delay > 0 {
				time.Sleep(*delay)
			}
			<-slots
			served.Add(1)
		} else if *delay > 0 {
			t := time.NewTimer(*delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		h := w.Header()
		h["Content-Length"] = contentLength
		h["Content-Type"] = contentType
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		answered.Add(1)
	})

	srv := &http.Server{
		Addr:              *listen,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				accepted.Add(1)
			}
		},
	}

	if *h2c {
		// net/http tells the two apart by the HTTP/2 connection preface.
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}

	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		_ = srv.Close()
	}()

	if *capacity > 0 {
		capStr := "unbounded"
		if *delay > 0 {
			capStr = strconv.FormatFloat(float64(*capacity)/delay.Seconds(), 'f', 0, 64) + " req/s"
		}
		log.Printf("backend: listening on %s (body %d bytes, delay %s, capacity %d concurrent = %s)", *listen, bodySize, *delay, *capacity, capStr)
	} else {
		log.Printf("backend: listening on %s (body %d bytes, delay %s, h2c %v)", *listen, bodySize, *delay, *h2c)
	}
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatalf("backend: %v", err)
	}
}
