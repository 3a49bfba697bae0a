package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// An HTTP/2 request that ends (its client cancels: RST_STREAM) while its
// backend exchange is under way aborts that exchange at once: the backend
// connection is closed, never pooled with bytes of the ended exchange on
// it, and the slot goes back, whether levee was waiting for the response
// head or streaming the body. response_header_timeout (30 s) is past the guard: only
// the cancellation can end the exchange within the test.
func TestH2ClientGoneAbortsTheBackendExchange(t *testing.T) {
	for _, stage := range []string{"head", "body"} {
		t.Run(stage, func(t *testing.T) {
			closed := make(chan struct{}, 1)
			got := make(chan struct{}, 1)
			be := scriptBackend(t, func(c net.Conn, br *bufio.Reader) {
				if stage == "body" {
					// Longer than the response buffer (so it streams), and more than
					// enough of it to pass the HTTP/2 writer's buffer.
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", 64<<20, strings.Repeat("x", 64<<10))
				}
				got <- struct{}{}
				io.Copy(io.Discard, br) // until levee closes (or the guard's deadline)
				closed <- struct{}{}
			})
			p := startProxy(t, "listen: [{addr: 127.0.0.1:0, h2c: true}]\nupstream: {response_header_timeout: 30s}\n"+
				photosApp(be, "{concurrency: 1, queue: {max_wait: 1s}}", ""))
			client := newClient(t, &http.Transport{Protocols: h2cOnly()})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/slow", nil)
			req.Host = "photos.test"
			done := make(chan error, 1)
			go func() {
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.ReadFull(resp.Body, make([]byte, 1000))
					resp.Body.Close()
				}
				done <- err
			}()
			recv(t, got, "the request at the backend")
			if stage == "body" {
				if err := recv(t, done, "the first bytes of the body"); err != nil {
					t.Fatalf("reading the first bytes: %v", err)
				}
			}
			cancel()
			recv(t, closed, "levee to close the backend connection of the cancelled exchange")
			waitFor(t, "the slot back", func() bool { return p.metric("levee_inflight", map[string]string{"app": "photos"}) == 0 })
		})
	}
}
