// Package admin serves levee's admin listener: health, readiness, metrics
// and reload. It sits beside the request path, never on it.
package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/leveeproxy/levee/internal/observe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options wire the admin endpoints to the running proxy.
type Options struct {
	Registry *prometheus.Registry
	// Ready reports whether the proxy is serving (listeners bound, not draining).
	Ready func() bool
	// Reload reloads the config file, returning why it was refused.
	Reload func() error
	// Upgrade replaces the running levee with a new process of binary
	// (empty: the same one), returning its PID once it serves, or why it
	// failed (the old one then serves on). Nil: POST /upgrade is 404.
	Upgrade func(binary string) (int, error)
	// App returns one app's state, served as JSON by
	// GET /api/apps/{app}/backends; false for an unknown app.
	App func(name string) (observe.AppStats, bool)
	// Addr is the admin listener's address (host:port); its host is
	// accepted in the Host header beside loopback names.
	Addr string
	// Token, when non-empty, is the bearer token every mutating endpoint
	// requires. When empty, mutating endpoints take requests on a loopback
	// address only, and none from a browser page of another origin.
	Token string
	// Pprof serves /debug/pprof/; off, those paths are 404.
	Pprof bool
	// API is the live view the JSON endpoints and the /ui dashboard serve
	// (nil: neither); Done, closed at shutdown, ends the event streams.
	API  API
	Done <-chan struct{}
	// Certs serves /api/certs (nil: tls.acme off, 404).
	Certs Certs
}

// Handler returns the admin endpoints. Every request must name a loopback
// host or the admin address's host in Host (else 421, against DNS
// rebinding); mutating endpoints are guarded as Options.Token says (401 or
// 403). Read-only endpoints need no token.
//
//	GET  /healthz   200 while the process runs
//	GET  /readyz    200 while serving, 503 before and while draining
//	GET  /metrics   Prometheus metrics
//	POST /reload    reload the config; 200 or 400 with the reason (JSON); mutating
//	POST /upgrade   start a new levee on the same sockets and lock; 200 with its pid once it
//	                serves, or 502 with why it failed ({"binary": PATH} optional); mutating
//	GET  /api/apps                 the apps serving, busiest first (?limit=N)
//	GET  /api/apps/{app}           one app: live rates, limits configured and in force, backends, top clients
//	GET  /api/apps/{app}/top       heaviest clients (?by=requests|rejected|bytes|items&window=10s|1m|10m)
//	GET  /api/apps/{app}/backends  the app's backends: share, in flight, latency, health, imbalance; top_clients (limits.client.top_k)
//	GET  /api/instance             role, scale, cluster, version, config
//	GET  /api/events               server-sent events: a snapshot a second (?app=&by=&window=)
//	GET  /api/certs                ACME certificates, soonest expiry first (?limit=N&expiring=336h); {"acme": false} when off
//	GET  /api/certs/{name}         one certificate: issuer, expiry, next renewal, last error
//	POST /api/certs/{name}/renew   renew it now, within the budgets; mutating
//	GET  /ui/                      the dashboard, live from /api/events (?app=&by=&window=); /ui redirects here
//	GET  /debug/pprof/...  Go profiles, with Options.Pprof only
func Handler(o Options) http.Handler {
	g := newGuard(o)
	mux := http.NewServeMux()
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if o.Ready != nil && !o.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	mux.HandleFunc("GET /api/apps/{app}/backends", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var st observe.AppStats
		ok := false
		if o.App != nil {
			st, ok = o.App(r.PathValue("app"))
		}
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"error": "no such app"})
			return
		}
		json.NewEncoder(w).Encode(st)
	})
	if o.API != nil {
		(&apiHandlers{api: o.API, done: o.Done}).register(mux)
		registerUI(mux)
	}
	switch {
	case o.Certs != nil:
		registerCerts(mux, g, o.Certs)
	case o.API != nil:
		// The dashboard asks; a 404 would be an error in its console.
		mux.HandleFunc("GET /api/certs", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, map[string]any{"acme": false, "certs": []any{}})
		})
	}
	mux.HandleFunc("POST /reload", g.mutating(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := o.Reload(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"ok": true})
	}))
	if o.Upgrade != nil {
		mux.HandleFunc("POST /upgrade", g.mutating(upgradeHandler(o.Upgrade, o.Token != "")))
	}
	return g.checkHost(mux)
}
