package server

// End-to-end tests of levee's upstream connections (docs/architecture.md,
// "Upstream connections"): how long a backend may take. They run on both
// engines.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// sseBackend sends an event stream of n events, gap apart, flushing each.
func sseBackend(t *testing.T, n int, gap time.Duration) string {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for i := range n {
			if i > 0 {
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
		}
	})
}

// readEvents reads an event stream to its end, returning the data lines
// and the error that ended it (nil for a clean end).
func readEvents(body io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	return events, sc.Err()
}

// A stream that lasts five times upstream.response_header_timeout, with each
// gap a fifteenth of it, arrives whole: the timeout bounds the wait for the
// headers and then each read's idleness, never the whole body.
func TestStreamOutlastsResponseHeaderTimeout(t *testing.T) {
	const (
		timeout = 600 * time.Millisecond
		gap     = timeout / 15
		n       = 75 // 5 × timeout
	)
	backend := sseBackend(t, n, gap)
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
	resp := p.get("photos.test", "/events")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	events, err := readEvents(resp.Body)
	if err != nil || len(events) != n {
		t.Fatalf("%d of %d events, ended by %v: the stream was cut off", len(events), n, err)
	}
	for i, e := range events {
		if e != fmt.Sprint(i) {
			t.Fatalf("event %d is %q", i, e)
		}
	}
}

// A backend that sends its headers and one event, then stalls: on fasthttp
// the body read that waits longer than upstream.response_header_timeout
// fails, the client's stream breaks off (it never ends as if complete) and
// levee closes the backend's connection. net/http bounds only the headers:
// its stream stays open until a side leaves, as documented.
func TestStalledStreamEndsAfterResponseHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	stall := newGate()
	defer stall.open()
	closed := make(chan struct{}) // the backend saw levee close its connection
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 0\n\n")
		http.NewResponseController(w).Flush()
		if !stall.wait(r) {
			close(closed)
		}
	})
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
	resp := p.get("photos.test", "/events")
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" {
		t.Fatalf("first event %q (%v)", line, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()

	if testEngine() != config.EngineFastHTTP {
		// net/http: nothing ends the stream while the backend holds it open.
		select {
		case err := <-ended:
			t.Fatalf("net/http: the stream ended (%v) while the backend stalled; update docs/config.md", err)
		case <-time.After(5 * timeout):
		}
		stall.open()
		if err := recv(t, ended, "the stream's end once the backend finished"); err != nil {
			t.Fatalf("net/http: the stream ended with %v once the backend finished, want a clean end", err)
		}
		return
	}
	if err := recv(t, ended, "the stalled stream's end"); err == nil {
		t.Fatal("the stalled stream ended cleanly, as if complete; want it broken off")
	}
	recv(t, closed, "levee closing the stalled backend connection")
}
