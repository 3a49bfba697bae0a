package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/topk"
)

// sideBySide is one limits config served twice, on one fake clock: by a
// levee proxy in front of a backend, and by the admission middleware
// (limits.Handler, which admission.Gate.Wrap is) around the same backend
// handler.
type sideBySide struct {
	t            *testing.T
	proxy        *proxy
	direct       *httptest.Server
	handler      *limits.Handler
	entered      chan struct{}
	release      chan struct{}
	proxyBackend *httptest.Server
}

func newSideBySide(t *testing.T, limitsYAML string) *sideBySide {
	t.Helper()
	s := &sideBySide{t: t, entered: make(chan struct{}, 4), release: make(chan struct{})}
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "the handler's own answer to a failed read", http.StatusBadRequest)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/block") {
			s.entered <- struct{}{}
			<-s.release
		}
		_, _ = io.WriteString(w, "ok "+r.Header.Get("Levee-Shadow")+"\n")
	})
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s.proxyBackend = httptest.NewServer(backend)
	t.Cleanup(s.proxyBackend.Close)
	s.proxy = startProxyClock(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: %s\n",
		strings.TrimPrefix(s.proxyBackend.URL, "http://"), limitsYAML), clk)
	l, err := config.ParseLimits([]byte(limitsYAML))
	if err != nil {
		t.Fatal(err)
	}
	s.handler = limitsconf.Handler("a", l, clk, nil).With(backend)
	s.direct = httptest.NewUnstartedServer(s.handler)
	// Both protocols the proxy's tests run on (LEVEE_TEST_PROTO=h2c too).
	s.direct.Config.Protocols = new(http.Protocols)
	s.direct.Config.Protocols.SetHTTP1(true)
	s.direct.Config.Protocols.SetUnencryptedHTTP2(true)
	s.direct.Start()
	t.Cleanup(s.direct.Close)
	t.Cleanup(func() { close(s.release) })
	return s
}

// answer is what a refusal is compared by.
type answer struct {
	status                                    int
	reject, retryAfter, rateLimit, policy, ct string
	body                                      string
}

// request is one request of a side-by-side test.
type request struct {
	method, path, apiKey, body string
	chunked                    bool              // send the body without a length
	header                     map[string]string // more header fields
}

func do(t *testing.T, base, method, path, apiKey, body string) answer {
	t.Helper()
	a, err := send(base, request{method: method, path: path, apiKey: apiKey, body: body})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func send(base string, q request) (answer, error) {
	var rd io.Reader
	if q.body != "" {
		rd = strings.NewReader(q.body)
		if q.chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
	}
	req, _ := http.NewRequest(q.method, base+q.path, rd)
	req.Host = "a.test"
	if q.apiKey != "" {
		req.Header.Set("X-Api-Key", q.apiKey)
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h := resp.Header
	return answer{resp.StatusCode, h.Get("Levee-Reject"), h.Get("Retry-After"), h.Get("RateLimit"),
		h.Get("RateLimit-Policy"), h.Get("Content-Type"), string(b)}, nil
}

// both sends q to the proxy and to the middleware and wants the same
// answer, of status want.
func (s *sideBySide) both(q request, want int) answer {
	s.t.Helper()
	a, err := send(s.proxy.URL, q)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := send(s.direct.URL, q)
	if err != nil {
		s.t.Fatal(err)
	}
	if a != b {
		s.t.Fatalf("%s %s: proxy %+v\nmiddleware %+v", q.method, q.path, a, b)
	}
	if a.status != want {
		s.t.Fatalf("%s %s: %d (%s); want %d", q.method, q.path, a.status, a.reject, want)
	}
	return a
}

// hold sends a request to path from apiKey to both, each of which blocks
// in the backend until the test ends.
func (s *sideBySide) hold(path, apiKey string) {
	s.t.Helper()
	for _, base := range []string{s.proxy.URL, s.direct.URL} {
		go func() { _, _ = send(base, request{method: "GET", path: path, apiKey: apiKey}) }()
		select {
		case <-s.entered:
		case <-time.After(10 * time.Second):
			s.t.Fatal("the blocking request never reached the backend")
		}
	}
}

// queue sends q to both without waiting, once each is queued: the answers
// come on the channels (proxy, then middleware) when they are let go.
func (s *sideBySide) queue(q request) (proxy, direct <-chan answer) {
	s.t.Helper()
	var out [2]chan answer
	for i, side := range []struct {
		base   string
		queued func() int
	}{{s.proxy.URL, func() int { return s.proxy.app("a").Limiter.Queued() }},
		{s.direct.URL, func() int { return s.handler.Limiter().Queued() }}} {
		before := side.queued()
		out[i] = make(chan answer, 1)
		go func() {
			a, _ := send(side.base, q)
			out[i] <- a
		}()
		waitFor(s.t, "the request to queue", func() bool { return side.queued() > before })
	}
	return out[0], out[1]
}

// sameAnswer wants one answer from each channel, the same, of status want.
func (s *sideBySide) sameAnswer(proxy, direct <-chan answer, want int) answer {
	s.t.Helper()
	var got [2]answer
	for i, c := range []<-chan answer{proxy, direct} {
		select {
		case got[i] = <-c:
		case <-time.After(10 * time.Second):
			s.t.Fatal("no answer")
		}
	}
	if got[0] != got[1] {
		s.t.Fatalf("proxy %+v\nmiddleware %+v", got[0], got[1])
	}
	if got[0].status != want {
		s.t.Fatalf("%d (%s); want %d", got[0].status, got[0].reject, want)
	}
	return got[0]
}

// same sends one request to both and wants the same answer, and want's status.
func (s *sideBySide) same(method, path, apiKey, body string, want int) answer {
	s.t.Helper()
	a := do(s.t, s.proxy.URL, method, path, apiKey, body)
	b := do(s.t, s.direct.URL, method, path, apiKey, body)
	if a != b {
		s.t.Fatalf("%s %s: proxy %+v\nmiddleware %+v", method, path, a, b)
	}
	if a.status != want {
		s.t.Fatalf("%s %s: %d (%s); want %d", method, path, a.status, a.reject, want)
	}
	return a
}

func TestMiddlewareRefusesAsTheProxy(t *testing.T) {
	t.Run("rate", func(t *testing.T) {
		s := newSideBySide(t, "{rate: 10/s, burst: 2}")
		s.same("GET", "/", "", "", 200)
		s.same("GET", "/", "", "", 200)
		a := s.same("GET", "/", "", "", 429)
		if a.reject != "rate" || a.retryAfter == "" || a.rateLimit == "" || a.policy == "" {
			t.Fatalf("rate refusal: %+v", a)
		}
	})
	t.Run("client-rate", func(t *testing.T) {
		s := newSideBySide(t, "{client: {key: 'header:X-Api-Key', rate: 1/s, burst: 1}}")
		s.same("GET", "/", "k1", "", 200)
		a := s.same("GET", "/", "k1", "", 429)
		if a.reject != "client-rate" || a.rateLimit == "" {
			t.Fatalf("client-rate refusal: %+v", a)
		}
		s.same("GET", "/", "k2", "", 200)
	})
	t.Run("body", func(t *testing.T) {
		s := newSideBySide(t, "{body: 1KB}")
		s.same("POST", "/", "", strings.Repeat("x", 1000), 200)
		if a := s.same("POST", "/", "", strings.Repeat("x", 1001), 413); a.reject != "body" {
			t.Fatalf("body refusal: %+v", a)
		}
	})
	t.Run("queue-full", func(t *testing.T) {
		s := newSideBySide(t, "{concurrency: 1, queue: {max_len: 0}}")
		s.hold("/block", "")
		if a := s.same("GET", "/", "", "", 503); a.reject != "queue-full" {
			t.Fatalf("queue refusal: %+v", a)
		}
	})
	t.Run("shape", func(t *testing.T) {
		s := newSideBySide(t, "{url_length: 64, query_values: 2, header_count: 12, header_bytes: 1KB}")
		get := request{method: "GET", path: "/"}
		s.both(get, 200)
		for _, c := range []struct {
			q      request
			status int
			reject string
		}{
			{request{method: "GET", path: "/" + strings.Repeat("a", 80)}, 414, "url-length"},
			{request{method: "GET", path: "/?a=1&b=2&c=3"}, 414, "query-values"},
			{request{method: "GET", path: "/", header: manyHeaders(20, 4)}, 431, "header-count"},
			{request{method: "GET", path: "/", header: map[string]string{"X-Big": strings.Repeat("b", 2000)}}, 431, "header-bytes"},
		} {
			if a := s.both(c.q, c.status); a.reject != c.reject {
				t.Errorf("%s: %+v", c.reject, a)
			}
		}
		if a := s.both(request{method: "GET", path: "/?a=1&b=2"}, 200); a.reject != "" {
			t.Errorf("at the query limit: %+v", a)
		}
	})
	t.Run("per-path", func(t *testing.T) {
		s := newSideBySide(t, "{body: 4KB, per_path: {/upload: {body: 1KB}}}")
		body := strings.Repeat("x", 1500)
		s.both(request{method: "POST", path: "/", body: body}, 200)
		for _, chunked := range []bool{false, true} {
			if a := s.both(request{method: "POST", path: "/upload/x", body: body, chunked: chunked}, 413); a.reject != "body" {
				t.Errorf("chunked %v: %+v", chunked, a)
			}
		}
		s.both(request{method: "POST", path: "/upload", body: strings.Repeat("x", 1000), chunked: true}, 200) // 1KB: 1000 bytes
	})
	t.Run("body-chunked", func(t *testing.T) {
		s := newSideBySide(t, "{body: 1KB}")
		s.both(request{method: "POST", path: "/", body: strings.Repeat("x", 1000), chunked: true}, 200)
		if a := s.both(request{method: "POST", path: "/", body: strings.Repeat("x", 1001), chunked: true}, 413); a.reject != "body" {
			t.Fatalf("chunked body refusal: %+v", a)
		}
	})
	t.Run("batch", func(t *testing.T) {
		s := newSideBySide(t, "{batch: {json_field: items, max: 3}}")
		for _, chunked := range []bool{false, true} {
			s.both(request{method: "POST", path: "/", body: `{"items": [1, 2, 3]}`, chunked: chunked}, 200)
			if a := s.both(request{method: "POST", path: "/", body: `{"items": [1, 2, 3, 4]}`, chunked: chunked}, 422); a.reject != "batch-items" {
				t.Errorf("chunked %v: %+v", chunked, a)
			}
			if a := s.both(request{method: "POST", path: "/", body: `{"items": [1, 2`, chunked: chunked}, 400); a.reject != "batch-json" {
				t.Errorf("chunked %v: %+v", chunked, a)
			}
		}
		if rej := s.handler.Counts(); rej == nil {
			t.Fatal("no counts")
		}
	})
	t.Run("shadow", func(t *testing.T) {
		s := newSideBySide(t, "{rate: 10/s, burst: 1, url_length: 64, shadow: [rate, url-length]}")
		s.both(request{method: "GET", path: "/"}, 200)
		if a := s.both(request{method: "GET", path: "/", header: map[string]string{"Levee-Shadow": "forged"}}, 200); a.body != "ok rate\n" {
			t.Errorf("shadowed rate: %+v", a)
		}
		if a := s.both(request{method: "GET", path: "/" + strings.Repeat("a", 80)}, 200); a.body != "ok url-length, rate\n" {
			t.Errorf("two shadowed: %+v", a)
		}
		if _, sh := s.handler.Counts().Snapshot(); sh["rate"] != 2 || sh["url-length"] != 1 {
			t.Errorf("middleware's shadowed counts %v; want rate 2, url-length 1", sh)
		}
	})
	t.Run("priority", func(t *testing.T) {
		// A sheddable request waiting in a full queue is displaced by a
		// critical one, on both.
		s := newSideBySide(t, "{concurrency: 1, queue: {max_len: 1}, priority: {paths: {/bulk: sheddable, /pay: critical}}}")
		s.hold("/block", "")
		bulkP, bulkD := s.queue(request{method: "GET", path: "/bulk"})
		for _, base := range []string{s.proxy.URL, s.direct.URL} {
			go func() { _, _ = send(base, request{method: "GET", path: "/pay"}) }() // takes /bulk's place
		}
		if a := s.sameAnswer(bulkP, bulkD, 503); a.reject != "shed" {
			t.Fatalf("displaced: %+v", a)
		}
	})
	t.Run("fair-share", func(t *testing.T) {
		// k1 holds both slots: its next request is over its share, while
		// k2's waits for the next free slot.
		s := newSideBySide(t, "{concurrency: 2, queue: {max_len: 4}, fair_share: true, client: {key: 'header:X-Api-Key'}}")
		s.hold("/block", "k1")
		s.hold("/block", "k1")
		s.queue(request{method: "GET", path: "/", apiKey: "k2"})
		if a := s.both(request{method: "GET", path: "/", apiKey: "k1"}, 503); a.reject != "client-share" {
			t.Fatalf("over its share: %+v", a)
		}
	})
	t.Run("adaptive", func(t *testing.T) {
		s := newSideBySide(t, "{concurrency: {adaptive: gradient, min: 1, max: 1}, queue: {max_len: 0}}")
		s.hold("/block", "")
		if a := s.both(request{method: "GET", path: "/"}, 503); a.reject != "queue-full" {
			t.Fatalf("adaptive limit: %+v", a)
		}
	})
}

// manyHeaders is n header fields of values size bytes.
func manyHeaders(n, size int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", size)
	}
	return h
}

// The middleware's top clients name the heavy client as the proxy's do,
// from the same requests.
func TestMiddlewareTopClientsMatchTheProxy(t *testing.T) {
	s := newSideBySide(t, "{client: {key: 'header:X-Api-Key', top_k: 8}, batch: {json_field: items, max: 100}}")
	for i := range 12 {
		s.both(request{method: "POST", path: "/", apiKey: "quiet", body: `{"items": [` + strings.Repeat("1, ", 50) + `1]}`}, 200)
		if i%3 == 0 {
			s.both(request{method: "GET", path: "/", apiKey: "chatty"}, 200)
		}
		s.both(request{method: "GET", path: "/", apiKey: "chatty"}, 200)
	}
	for _, by := range []string{"requests", "items", "bytes"} {
		want, ok, err := s.proxy.srv.Table().Top("a", by, "10s")
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		got := s.handler.Top().Report(slices.Index(topk.Dimensions[:], by), 0, 0, 0, s.handler.Now())
		if len(got.Clients) == 0 || len(want.Clients) == 0 || got.Clients[0].Client != want.Clients[0].Client {
			t.Fatalf("by %s: middleware %+v\nproxy %+v", by, got, want)
		}
		if got.Clients[0].Count != want.Clients[0].Count && by != "bytes" {
			t.Errorf("by %s: middleware counts %d, proxy %d", by, got.Clients[0].Count, want.Clients[0].Count)
		}
	}
}
