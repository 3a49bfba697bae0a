package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
)

// sideBySide is one limits config served twice, on one fake clock: by a
// levee proxy in front of a backend, and by the admission middleware
// (limits.Handler, which admission.Middleware is) around the same backend
// handler.
type sideBySide struct {
	t            *testing.T
	proxy        *proxy
	direct       *httptest.Server
	entered      chan struct{}
	release      chan struct{}
	proxyBackend *httptest.Server
}

func newSideBySide(t *testing.T, limitsYAML string) *sideBySide {
	t.Helper()
	s := &sideBySide{t: t, entered: make(chan struct{}, 4), release: make(chan struct{})}
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/block" {
			s.entered <- struct{}{}
			<-s.release
		}
		_, _ = io.WriteString(w, "ok\n")
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
	s.direct = httptest.NewUnstartedServer(limits.NewHandler("a", l, clk, backend))
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

func do(t *testing.T, base, method, path, apiKey, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Host = "a.test"
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h := resp.Header
	return answer{resp.StatusCode, h.Get("Levee-Reject"), h.Get("Retry-After"), h.Get("RateLimit"),
		h.Get("RateLimit-Policy"), h.Get("Content-Type"), string(b)}
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
		for _, base := range []string{s.proxy.URL, s.direct.URL} {
			go func() {
				req, _ := http.NewRequest("GET", base+"/block", nil)
				req.Host = "a.test"
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-s.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the blocking request never reached the backend")
			}
		}
		if a := s.same("GET", "/", "", "", 503); a.reject != "queue-full" {
			t.Fatalf("queue refusal: %+v", a)
		}
	})
}
