// Command backend is a tiny, fast HTTP/1.1 origin used by levee's benchmarks.
//
// Every request, whatever its method or path, is answered with status 200 and
// the same fixed 100-byte body (Content-Length: 100). An optional -delay holds
// each response for a fixed time, for overload benchmarks.
//
//	go build -o backend ./bench/backend
//	GOMAXPROCS=1 ./backend -listen 127.0.0.1:9101 [-delay 5ms]
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// bodySize is the fixed response body length in bytes.
const bodySize = 100

func main() {
	listen := flag.String("listen", "127.0.0.1:9101", "address to listen on (host:port)")
	delay := flag.Duration("delay", 0, "fixed delay before each response (e.g. 5ms); 0 = none")
	flag.Parse()

	body := make([]byte, bodySize)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	body[bodySize-1] = '\n'
	contentLength := []string{strconv.Itoa(bodySize)}
	contentType := []string{"text/plain; charset=utf-8"}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Drain any request body so the connection can be reused.
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		if *delay > 0 {
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
	})

	srv := &http.Server{
		Addr:              *listen,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}

	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		_ = srv.Close()
	}()

	log.Printf("backend: listening on %s (body %d bytes, delay %s)", *listen, bodySize, *delay)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatalf("backend: %v", err)
	}
}
