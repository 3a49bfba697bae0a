package server

// The fault matrix (issue 24, point 5): a real HTTP backend behind a real
// fault proxy (toxiproxy, in process), each fault under a bounded load of
// concurrent clients, every request on a path of its own whose answer
// names it. The invariants: every request is answered by the deadline (a
// 200 with its own whole body, levee's own 502 or 504, or, where a fault
// cuts a response levee had begun to pass on, a body that breaks off);
// no answer names another request; no 200 ends cleanly short; and nothing
// leaks: no backend connection is left active, the connections levee
// counts open are the ones open at the backend, and no goroutine remains.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// matrixTimeout is upstream.response_header_timeout in the cases where the
// backend hangs: small, so that what hangs ends soon, yet past what a
// loaded 2-core machine under -race stalls a healthy read. Cases with no
// hang take calmTimeout: a fault there must never need a deadline.
const (
	matrixTimeout = 3 * time.Second
	calmTimeout   = 10 * time.Second
)

// Sizes of the matrix's bodies: small ones are read whole by levee before
// the client gets a byte (at most limits.response_buffer); large ones
// stream through.
const (
	smallBody = 1024
	largeBody = 80 << 10
)

// frame is how the backend frames one answer, chosen by the request.
type frame string

const (
	frameLength  frame = "length"  // Content-Length
	frameChunked frame = "chunked" // chunks, flushed as written
	frameClose   frame = "close"   // Connection: close, the body ends at the close
	frameHang    frame = "hang"    // a Content-Length head and half the body, then nothing
)

// matrixBody is the body the backend sends for path: the path, repeated to
// size bytes, so that an answer names its request.
func matrixBody(path string, size int) string {
	s := path + ";"
	return strings.Repeat(s, size/len(s)+1)[:size]
}

// toxicBackend is a real HTTP/1.1 backend behind a toxiproxy proxy. addr
// is the proxy's: what levee is told the backend is. It counts the
// connections open at the backend, and stops everything when the test
// ends.
type toxicBackend struct {
	addr  string
	proxy *toxiproxy.Proxy
	open  atomic.Int64 // connections open at the backend
	done  chan struct{}
}

func newToxicBackend(t *testing.T) *toxicBackend {
	t.Helper()
	b := &toxicBackend{done: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(b.done) }) // before srv.Close: hung handlers return

	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	b.proxy = toxiproxy.NewProxy(api, "backend", "127.0.0.1:0", srv.Listener.Addr().String())
	if err := b.proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.proxy.Stop)
	b.addr = b.proxy.Listen
	return b
}

// toxic adds a toxic, in toxiproxy's JSON (its API's body).
func (b *toxicBackend) toxic(t *testing.T, js string) {
	t.Helper()
	if _, err := b.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("toxic %s: %v", js, err)
	}
}

// serve answers /ANY?size=N&frame=F with matrixBody(path, N), framed so.
func (b *toxicBackend) serve(w http.ResponseWriter, r *http.Request) {
	size, _ := strconv.Atoi(r.URL.Query().Get("size"))
	body := matrixBody(r.URL.Path, size)
	w.Header().Set("Content-Type", "text/plain")
	switch frame(r.URL.Query().Get("frame")) {
	case frameLength:
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.WriteString(w, body)
	case frameChunked:
		for len(body) > 0 {
			n := min(len(body), 4096)
			io.WriteString(w, body[:n])
			w.(http.Flusher).Flush()
			body = body[n:]
		}
	case frameClose:
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + body)
		bw.Flush()
	case frameHang:
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.WriteString(w, body[:size/2])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done(): // levee gave up on the connection
		case <-b.done:
		}
	}
}

// outcome is what one request of the matrix got.
type outcome int

const (
	served     outcome = iota // 200 with its own whole body
	leveeError                // levee's own 502 or 504
	brokenOff                 // the head came, the body broke off
	noHead                    // the connection or stream ended before any head
	nOutcomes
)

func (o outcome) String() string {
	return [...]string{"served", "levee-error", "broken-off", "no-head"}[o]
}

// tally counts outcomes, and levee's errors by status and reason.
type tally struct {
	mu      sync.Mutex
	n       [nOutcomes]int
	errors  map[string]int // "502 backend-unreachable"
	slowest time.Duration
}

func (t *tally) add(o outcome, detail string, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[o]++
	if o == leveeError {
		if t.errors == nil {
			t.errors = map[string]int{}
		}
		t.errors[detail]++
	}
	t.slowest = max(t.slowest, took)
}

func (t *tally) String() string {
	return fmt.Sprintf("served %d, levee's errors %d %v, broken off %d, no head %d; slowest %v",
		t.n[served], t.n[leveeError], t.errors, t.n[brokenOff], t.n[noHead], t.slowest.Round(time.Millisecond))
}

// matrixRequest sends one request of the matrix and checks its answer:
// the test fails on an answer naming another request, a 200 that ends
// cleanly short, a status levee does not give, or no answer by guard.
func matrixRequest(t *testing.T, p *proxy, path string, size int, fr frame) (outcome, string, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	url := fmt.Sprintf("%s%s?size=%d&frame=%s", p.URL, path, size, fr)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Host = "photos.test"
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s (%s): no answer within %v", path, fr, guard)
		}
		return noHead, err.Error(), time.Since(start)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s (%s): %d, and its body did not end within %v", path, fr, resp.StatusCode, guard)
	}
	switch {
	case resp.StatusCode == http.StatusOK && err != nil:
		return brokenOff, err.Error(), took
	case resp.StatusCode == http.StatusOK:
		if want := matrixBody(path, size); string(body) != want {
			t.Errorf("%s (%s): 200 with a body of %d bytes ending cleanly, not its own %d: %.60q",
				path, fr, len(body), len(want), body)
		}
		return served, "", took
	case (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout) &&
		resp.Header.Get("Levee-Error") != "":
		return leveeError, fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Levee-Error")), took
	default:
		t.Errorf("%s (%s): %d %q %v; want 200, or levee's 502 or 504", path, fr, resp.StatusCode, body, resp.Header)
		return leveeError, strconv.Itoa(resp.StatusCode), took
	}
}

// matrixCase is one fault of the matrix.
type matrixCase struct {
	name   string
	toxics []string // toxiproxy's JSON
	// mix chooses request i of a client's size and framing.
	mix func(i int) (int, frame)
	// allowed are the outcomes the fault may give a request of size bytes
	// framed so.
	allowed func(size int, fr frame) []outcome
	// faulty: the fault must show (a request not served, or retried), or
	// the case proves nothing.
	faulty   bool
	requests int  // per client
	hangs    bool // the backend hangs: upstream.response_header_timeout is matrixTimeout
}

// plainMix: three small bodies of known length, then a large chunked one.
func plainMix(i int) (int, frame) {
	if i%4 == 3 {
		return largeBody, frameChunked
	}
	return smallBody, frameLength
}

func onlyServed(int, frame) []outcome { return []outcome{served} }

// cutHeld is how a response levee holds whole (a small body of known
// length) ends when the backend fails before its end: levee's own 502 or
// 504, on both engines (on HTTP/2, ReverseProxy aborts the handler and
// serveHeld answers what it held with a 502).
func cutHeld() []outcome { return []outcome{leveeError} }

const matrixClients = 16

func TestFaultMatrix(t *testing.T) {
	for _, tc := range []matrixCase{
		{
			name:    "latency",
			toxics:  []string{`{"type":"latency","stream":"downstream","attributes":{"latency":20,"jitter":10}}`, `{"type":"latency","stream":"upstream","attributes":{"latency":5}}`},
			mix:     plainMix,
			allowed: onlyServed, requests: 25,
		},
		{
			name:    "bandwidth",
			toxics:  []string{`{"type":"bandwidth","stream":"downstream","attributes":{"rate":512}}`},
			mix:     plainMix,
			allowed: onlyServed, requests: 25,
		},
		{
			name: "slicer",
			toxics: []string{`{"type":"slicer","stream":"downstream","attributes":{"average_size":64,"size_variation":48,"delay":20}}`,
				`{"type":"slicer","stream":"upstream","attributes":{"average_size":8,"size_variation":6,"delay":10}}`},
			mix:     plainMix,
			allowed: onlyServed, requests: 25,
		},
		{
			// The backend's close reaches levee late: an answer framed by
			// the close ends then; one of known length ends at its length.
			name:   "slow-close",
			toxics: []string{`{"type":"slow_close","stream":"downstream","attributes":{"delay":300}}`},
			mix: func(i int) (int, frame) {
				if i%3 == 1 {
					return smallBody, frameClose
				}
				return plainMix(i)
			},
			allowed: onlyServed, requests: 15,
		},
		{
			// Half the connections are reset (RST) instead of carrying
			// their first answer: no head has come, so levee answers.
			name:    "reset-before-response",
			toxics:  []string{`{"type":"reset_peer","stream":"downstream","toxicity":0.5,"attributes":{"timeout":0}}`},
			mix:     plainMix,
			allowed: func(int, frame) []outcome { return []outcome{served, leveeError} },
			faulty:  true, requests: 25,
		},
		{
			// Each connection is reset (RST: a reset_peer toxic that never
			// fires sets SO_LINGER 0) once 2,800 bytes have come back: inside
			// the third small answer (about 1,150 bytes each) or inside a
			// large one, never at an answer's end. A small body is held whole
			// by levee, so its client gets levee's 502; a large one streams,
			// and breaks off.
			name: "reset-mid-response",
			toxics: []string{`{"type":"reset_peer","stream":"downstream","toxicity":0,"attributes":{"timeout":0}}`,
				`{"type":"limit_data","stream":"downstream","attributes":{"bytes":2800}}`},
			mix: plainMix,
			allowed: func(size int, fr frame) []outcome {
				if size == largeBody {
					return []outcome{served, leveeError, brokenOff}
				}
				return append(cutHeld(), served)
			},
			faulty: true, requests: 25,
		},
		{
			// Half the connections go silent (toxiproxy's timeout
			// toxic: the answer is dropped, nothing closes): 504 at the
			// response_header_timeout.
			name:    "silent",
			toxics:  []string{`{"type":"timeout","stream":"downstream","toxicity":0.5,"attributes":{"timeout":0}}`},
			mix:     plainMix,
			allowed: func(int, frame) []outcome { return []outcome{served, leveeError} },
			faulty:  true, requests: 12, hangs: true,
		},
		{
			// Every fourth request finds a backend that sends the head and
			// half the body, then hangs: a small body is held by levee and
			// answered 504 (or 502) when the read deadline passes; a large
			// one has begun to stream and breaks off then. Through a latency
			// toxic, so the proxy is in the path.
			name:   "hang-after-header",
			toxics: []string{`{"type":"latency","stream":"downstream","attributes":{"latency":2}}`},
			mix: func(i int) (int, frame) {
				switch i % 8 {
				case 1:
					return smallBody, frameHang
				case 5:
					return largeBody, frameHang
				}
				return plainMix(i)
			},
			allowed: func(size int, fr frame) []outcome {
				switch {
				case fr != frameHang:
					return []outcome{served}
				case size == largeBody:
					return []outcome{brokenOff}
				}
				return cutHeld()
			},
			faulty: true, requests: 16, hangs: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) { runMatrixCase(t, tc) })
	}
}

func runMatrixCase(t *testing.T, tc matrixCase) {
	leaktest.CheckIgnoring(t, "github.com/Shopify/toxiproxy/")
	be := newToxicBackend(t)
	timeout := calmTimeout
	if tc.hangs {
		timeout = matrixTimeout
	}
	p := startProxy(t, photosApp(be.addr, "", fmt.Sprintf("upstream: {response_header_timeout: %v}\n", timeout)))
	for _, js := range tc.toxics {
		be.toxic(t, js)
	}
	bound := timeout + faultMargin
	var all tally
	var wg sync.WaitGroup
	for c := range matrixClients {
		wg.Go(func() {
			for i := range tc.requests {
				size, fr := tc.mix(i)
				path := fmt.Sprintf("/%s/c%d/r%d", tc.name, c, i)
				o, detail, took := matrixRequest(t, p, path, size, fr)
				all.add(o, detail, took)
				if !slices.Contains(tc.allowed(size, fr), o) {
					t.Errorf("%s (%s, %d bytes): %v %s; want one of %v", path, fr, size, o, detail, tc.allowed(size, fr))
				}
				if took > bound {
					t.Errorf("%s (%s): answered after %v; want within the %v deadline (+ at most %v)", path, fr, took, timeout, faultMargin)
				}
			}
		})
	}
	wg.Wait()
	dials := p.metric("levee_backend_dials_total", map[string]string{"backend": be.addr})
	exchanges := p.metric("levee_backend_exchanges_total", map[string]string{"backend": be.addr})
	if n := matrixClients * tc.requests; tc.faulty && all.n[served] == n && exchanges == float64(n) {
		t.Errorf("every request was served at the first try: the fault did not show, and the case proves nothing")
	}
	t.Logf("%s (%s): %d requests: %v; %v dials for %v exchanges",
		tc.name, testProto(), matrixClients*tc.requests, &all, dials, exchanges)

	// Nothing leaks: no exchange left under way, and the connections
	// levee holds are those the backend has open: none levee lost count
	// of, none it pooled that the fault had closed.
	conns := func(state string) float64 {
		return p.metric("levee_backend_conns", map[string]string{"backend": be.addr, "state": state})
	}
	var active, idle float64
	var open int64
	cond := func() bool {
		active, idle, open = conns("active"), conns("idle"), be.open.Load()
		return active == 0 && idle == float64(open) && idle <= matrixClients
	}
	deadline := time.Now().Add(guard)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !cond() {
		t.Errorf("backend connections after the load: levee %v active, %v idle; the backend %d open; want 0 active, and levee's idle (at most %d) the backend's open",
			active, idle, open, matrixClients)
	}

	// The pool holds nothing the fault left: with the fault gone, every
	// client is served its own answer. (Removing a timeout toxic closes
	// every connection through it: levee finds its idle ones closed.)
	be.proxy.Toxics.ResetToxics(context.Background())
	for c := range matrixClients {
		wg.Go(func() {
			for i := range 4 {
				size, fr := plainMix(i)
				path := fmt.Sprintf("/%s/after/c%d/r%d", tc.name, c, i)
				if o, detail, _ := matrixRequest(t, p, path, size, fr); o != served {
					t.Errorf("%s with the fault gone: %v %s; want served", path, o, detail)
				}
			}
		})
	}
	wg.Wait()
}
