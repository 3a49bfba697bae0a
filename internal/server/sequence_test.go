package server

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit/limit"
)

// The tests here pin what the two engines once did differently, each
// now one code path (serve): they run over HTTP/1.1 and, in TestMain's
// second run, over h2c.

// A client key header sent in any letter case is one client for every
// step: the rate limit counts it under its key, and so do the top clients
// (fasthttp passes header names through as sent).
func TestClientKeyHeaderInAnyCaseIsOneClient(t *testing.T) {
	p, _, _ := rateProxy(t, "{client: {key: header:X-Api-Key, rate: 1/m, burst: 3, top_k: 4}}")
	codes := map[int]int{}
	for _, name := range []string{"x-api-key", "X-API-KEY", "X-Api-Key", "x-Api-kEy"} {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		req.Host = "a.test"
		req.Header[name] = []string{"alice"} // as written: Go's HTTP/1.1 client keeps the case
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 1 {
		t.Errorf("codes %v, want 3×200 then 1×429: one client's burst of 3", codes)
	}
	got := p.series("levee_top_client_requests")
	if fmt.Sprint(got) != fmt.Sprint(map[string]float64{"alice": 4}) {
		t.Errorf("levee_top_client_requests = %v, want alice=4 (not the peer's address)", got)
	}
}

// An adaptive concurrency limit learns of failed requests (a 5xx) on
// both engines, not only on net/http.
func TestAdaptiveLimitSamplesFailures(t *testing.T) {
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	p := startProxy(t, photosApp(backend, "{concurrency: {adaptive: gradient, min: 4, max: 16}}", ""))
	rec := &recordingAlg{Algorithm: p.app("photos").Adaptive.Algorithm()}
	p.app("photos").Adaptive.SetAlgorithm(rec)
	for _, path := range []string{"/ok", "/fail", "/ok", "/fail", "/fail"} {
		readAll(t, p.get("photos.test", path))
	}
	waitFor(t, "five samples", func() bool { return rec.samples() == 5 })
	if ok, failed := rec.counts(); ok != 2 || failed != 3 {
		t.Fatalf("samples: %d ok, %d failed; want 2 ok, 3 failed", ok, failed)
	}
}

// recordingAlg counts the samples an adaptive limit is given.
type recordingAlg struct {
	limit.Algorithm
	mu         sync.Mutex
	ok, failed int
}

func (r *recordingAlg) Observe(now time.Time, rtt time.Duration, inflight int, failed bool) {
	r.mu.Lock()
	if failed {
		r.failed++
	} else {
		r.ok++
	}
	r.mu.Unlock()
	r.Algorithm.Observe(now, rtt, inflight, failed)
}

func (r *recordingAlg) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.failed
}

func (r *recordingAlg) samples() int { ok, failed := r.counts(); return ok + failed }

// A shape refusal found before the body is read keeps the connection (the
// engine reads past a small unread body), as every other refusal does: a
// reconnect under overload costs more than a reply. HTTP/1.1 only: an
// HTTP/2 refusal ends a stream, never the connection.
func TestShapeRefusalKeepsTheConnection(t *testing.T) {
	skipOnH2C(t, "raw HTTP/1.1 connection reuse")
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	p := startProxy(t, photosApp(backend, "{url_length: 32, header_count: 8}", ""))
	addr := strings.TrimPrefix(p.URL, "http://")
	body := strings.Repeat("b", 1000)
	br, conn := rawExchange(t, addr,
		"GET /"+strings.Repeat("x", 40)+" HTTP/1.1\r\nHost: photos.test\r\n\r\n"+
			"POST /"+strings.Repeat("y", 40)+" HTTP/1.1\r\nHost: photos.test\r\nContent-Length: 1000\r\n\r\n"+body)
	defer conn.Close()
	for _, want := range []int{414, 414} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != want || resp.Close {
			t.Fatalf("status %d close %v, want %d on a connection kept open", resp.StatusCode, resp.Close, want)
		}
	}
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: photos.test\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the connection was not kept after the refusals: %v", err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after the refusals, want 200", resp.StatusCode)
	}
}
