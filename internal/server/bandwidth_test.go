package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A download through an app with limits.bandwidth takes at least as long
// as the rate allows beyond the burst. (A lower bound on time: a slow
// machine cannot make it fail, only broken pacing can.)
func TestBandwidthPacesResponses(t *testing.T) {
	const size = 400 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.Write([]byte(strings.Repeat("x", size)))
	}))
	t.Cleanup(srv.Close)
	// Streamed (longer than response_buffer), and read whole into the
	// buffer first: paced either way.
	for _, limits := range []string{"{bandwidth: 1MB/s}", "{bandwidth: 1MB/s, response_buffer: 1MiB}"} {
		t.Run(limits, func(t *testing.T) {
			p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: %s
`, strings.TrimPrefix(srv.URL, "http://"), limits))
			start := time.Now()
			resp := p.get("a.test", "/")
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			if err != nil || n != size {
				t.Fatalf("read %d bytes, err %v; want %d", n, err, size)
			}
			// burst: a tenth of a second's worth, at least 64 KiB → 100 KB at 1 MB/s.
			if least := time.Duration(float64(size-100_000) / 1e6 * float64(time.Second) * 0.95); took < least {
				t.Fatalf("%d bytes at 1MB/s took %v; pacing allows no less than %v", size, took, least)
			}
		})
	}
}

// Transfers that would be held longer than max_delay for their next chunk
// are cut: 503 Levee-Reject: bandwidth (or a closed connection once the
// response has started), and counted. Four uploads share 64 KB/s, so a
// chunk of 16 KiB waits about a second for its turn, far past 300ms, until
// cuts leave one upload alone at the full rate.
func TestBandwidthCutsTransfersHeldTooLong(t *testing.T) {
	be := newBodyBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {bandwidth: {rate: 64KB/s, max_delay: 300ms}}
`, be.addr()))
	done := make(chan int, 4)
	for range 4 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, p.URL+"/", strings.NewReader(strings.Repeat("y", 192<<10)))
			req.Host = "a.test"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0 // closed mid-upload: also a cut
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Levee-Reject") != "bandwidth" {
				t.Errorf("503 with Levee-Reject %q; want bandwidth", resp.Header.Get("Levee-Reject"))
			}
			done <- resp.StatusCode
		}()
	}
	passed := 0
	for range 4 {
		if code := <-done; code == http.StatusOK {
			passed++
		}
	}
	if passed == 4 {
		t.Fatal("four uploads sharing 64 KB/s all passed; with max_delay 300ms some must be cut")
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "bandwidth"}); got < 1 {
		t.Fatalf("levee_rejected_total{reason=bandwidth} = %v; want the cuts counted", got)
	}
	if got := be.complete.Load(); got != int64(passed) {
		t.Fatalf("the backend received %d whole bodies; want only the %d uploads that passed", got, passed)
	}
}
