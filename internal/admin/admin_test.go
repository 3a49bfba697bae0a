package admin

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leveeproxy/levee/internal/observe"
	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_test_total", Help: "t"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	reloadErr := errors.New("config: apps.a.bogus: unknown key")
	var failReload atomic.Bool
	h := Handler(Options{
		Registry: reg,
		Ready:    ready.Load,
		App: func(name string) (observe.AppStats, bool) {
			if name != "photos" {
				return observe.AppStats{}, false
			}
			return observe.AppStats{Name: "photos", Imbalance: 1.02}, true
		},
		Reload: func() error {
			if failReload.Load() {
				return reloadErr
			}
			return nil
		},
		Addr:  "127.0.0.1:9901",
		Pprof: true,
	})
	do := func(method, path string) (int, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.Host = "127.0.0.1:9901"
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	tests := []struct {
		name       string
		setup      func()
		method     string
		path       string
		wantCode   int
		wantInBody string
	}{
		{"healthz", nil, "GET", "/healthz", 200, "ok"},
		{"not ready yet", nil, "GET", "/readyz", 503, "not ready"},
		{"ready", func() { ready.Store(true) }, "GET", "/readyz", 200, "ready"},
		{"metrics", nil, "GET", "/metrics", 200, "levee_test_total 3"},
		{"reload ok", nil, "POST", "/reload", 200, `"ok":true`},
		{"reload refused", func() { failReload.Store(true) }, "POST", "/reload", 400, "apps.a.bogus"},
		{"reload needs POST", nil, "GET", "/reload", 405, ""},
		{"pprof", nil, "GET", "/debug/pprof/", 200, "goroutine"},
		{"app backends", nil, "GET", "/api/apps/photos/backends", 200, `"imbalance":1.02`},
		{"unknown app", nil, "GET", "/api/apps/nope/backends", 404, "no such app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			code, body := do(tt.method, tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantInBody) {
				t.Fatalf("%s %s = %d %q; want %d containing %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantInBody)
			}
		})
	}
}
