package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const testToken = "0123456789abcdef0123456789abcdef"

// adminWith returns the admin handler for o and a count of the reloads it ran.
func adminWith(o Options) (http.Handler, *atomic.Int64) {
	var reloads atomic.Int64
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	o.Reload = func() error { reloads.Add(1); return nil }
	return Handler(o), &reloads
}

type req struct {
	method, path, host string
	header             map[string]string
}

func (rq req) do(h http.Handler) *http.Response {
	r := httptest.NewRequest(rq.method, rq.path, strings.NewReader("x=1"))
	r.Host = rq.host
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestTokenRequired(t *testing.T) {
	h, reloads := adminWith(Options{Addr: "0.0.0.0:9901", Token: testToken})
	for _, tt := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer " + strings.Repeat("x", len(testToken)), 401},
		{"token prefix", "Bearer " + testToken[:16], 401},
		{"basic scheme", "Basic " + testToken, 401},
		{"token", "Bearer " + testToken, 200},
		{"scheme in any case", "bearer " + testToken, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := reloads.Load()
			res := req{"POST", "/reload", "10.0.0.5:9901", map[string]string{"Authorization": tt.auth}}.do(h)
			if res.StatusCode != tt.want {
				t.Fatalf("POST /reload with %q = %d, want %d", tt.auth, res.StatusCode, tt.want)
			}
			if got := reloads.Load() - before; (got == 1) != (tt.want == 200) {
				t.Fatalf("%d reloads ran, want them only on 200", got)
			}
			if tt.want == 401 && res.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Fatalf("401 without WWW-Authenticate: Bearer: %v", res.Header)
			}
		})
	}
	// Read-only endpoints need no token.
	if res := (req{"GET", "/healthz", "127.0.0.1:9901", nil}).do(h); res.StatusCode != 200 {
		t.Fatalf("GET /healthz without a token = %d, want 200", res.StatusCode)
	}
}

func TestCrossOriginReloadRefused(t *testing.T) {
	h, reloads := adminWith(Options{Addr: "127.0.0.1:9901"})
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no origin (curl)", nil, 200},
		{"same origin", map[string]string{"Origin": "http://127.0.0.1:9901"}, 200},
		{"other origin, text/plain", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403},
		{"other origin, form", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"origin of another port", map[string]string{"Origin": "http://127.0.0.1:8080"}, 403},
		{"opaque origin", map[string]string{"Origin": "null"}, 403},
		{"cross-site fetch without origin", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site fetch", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"typed in the address bar", map[string]string{"Sec-Fetch-Site": "none"}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := reloads.Load()
			res := req{"POST", "/reload", "127.0.0.1:9901", tt.header}.do(h)
			if res.StatusCode != tt.want {
				b, _ := io.ReadAll(res.Body)
				t.Fatalf("POST /reload %v = %d %q, want %d", tt.header, res.StatusCode, b, tt.want)
			}
			if got := reloads.Load() - before; (got == 1) != (tt.want == 200) {
				t.Fatalf("%d reloads ran, want them only on 200", got)
			}
		})
	}
	if res := (req{"GET", "/reload", "127.0.0.1:9901", nil}).do(h); res.StatusCode != 405 {
		t.Fatalf("GET /reload = %d, want 405", res.StatusCode)
	}
}

func TestHostChecked(t *testing.T) {
	for _, tt := range []struct {
		addr, host string
		want       int
	}{
		{"127.0.0.1:9901", "127.0.0.1:9901", 200},
		{"127.0.0.1:9901", "127.0.0.1", 200},
		{"127.0.0.1:9901", "127.8.9.10:9901", 200},
		{"127.0.0.1:9901", "localhost:9901", 200},
		{"127.0.0.1:9901", "LOCALHOST", 200},
		{"127.0.0.1:9901", "[::1]:9901", 200},
		{"127.0.0.1:9901", "evil.example:9901", 421}, // DNS rebinding: the attacker's name, our IP
		{"127.0.0.1:9901", "localhost.evil.example", 421},
		{"127.0.0.1:9901", "10.0.0.5:9901", 421},
		{"127.0.0.1:9901", "", 421},
		{"10.0.0.5:9901", "10.0.0.5:9901", 200},
		{"10.0.0.5:9901", "10.0.0.6:9901", 421},
		{"0.0.0.0:9901", "10.0.0.6:9901", 200}, // bound everywhere: any IP literal
		{"0.0.0.0:9901", "[fe80::1]:9901", 200},
		{"0.0.0.0:9901", "levee.internal:9901", 421},
		{":9901", "192.168.1.7", 200},
	} {
		h, reloads := adminWith(Options{Addr: tt.addr, Token: testToken})
		for _, rq := range []req{
			{"GET", "/metrics", tt.host, nil},
			{"POST", "/reload", tt.host, map[string]string{"Authorization": "Bearer " + testToken}},
		} {
			res := rq.do(h)
			if res.StatusCode != tt.want {
				t.Errorf("admin %s: %s %s with Host %q = %d, want %d", tt.addr, rq.method, rq.path, tt.host, res.StatusCode, tt.want)
			}
		}
		if tt.want != 200 && reloads.Load() != 0 {
			t.Errorf("admin %s: Host %q reloaded", tt.addr, tt.host)
		}
	}
}

func TestPprofOff(t *testing.T) {
	for _, tt := range []struct {
		pprof bool
		want  int
	}{{false, 404}, {true, 200}} {
		h, _ := adminWith(Options{Addr: "127.0.0.1:9901", Pprof: tt.pprof})
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/symbol"} {
			if res := (req{"GET", p, "127.0.0.1:9901", nil}).do(h); res.StatusCode != tt.want {
				t.Errorf("pprof %v: GET %s = %d, want %d", tt.pprof, p, res.StatusCode, tt.want)
			}
		}
	}
}

// TestNoTokenRemoteRefused: without a token, a reload that arrived on a
// non-loopback address is refused even if Handler was wired past validation.
func TestNoTokenRemoteRefused(t *testing.T) {
	h, reloads := adminWith(Options{Addr: "0.0.0.0:9901"})
	r := httptest.NewRequest("POST", "/reload", nil)
	r.Host = "10.0.0.5:9901"
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 9901}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 403 || reloads.Load() != 0 {
		t.Fatalf("POST /reload on 10.0.0.5 without a token = %d (%d reloads), want 403 and none", w.Code, reloads.Load())
	}
}
