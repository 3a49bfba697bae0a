package config

import (
	"strings"
	"testing"
)

// health.grpc is an HTTP/2 call: refused on an http1 app, in the file and
// in a stored app alike, with the field named; path is then optional.
func TestHealthGRPCNeedsHTTP2(t *testing.T) {
	const app = "apps:\n  a:\n    hosts: [a.test]\n    backends: ['127.0.0.1:9']\n"
	for _, tc := range []struct {
		src, err string
	}{
		{app + "    health: {grpc: true}\n",
			"apps.a.health.grpc: a gRPC health check is an HTTP/2 call: needs upstream.protocol h2c or h2 (got http1)"},
		{app + "    health: {grpc: true}\n    upstream: {protocol: http1}\n", "apps.a.health.grpc: "},
		{app + "    health: {grpc: true, path: /healthz}\n    upstream: {protocol: h2c}\n", "apps.a.health.path: not with health.grpc"},
		{app + "    health: {service: pkg.Echo}\n", "apps.a.health.service: only with health.grpc"},
		{app + "    health: {grpc: true, service: \"" + strings.Repeat("x", MaxGRPCService+1) + "\"}\n    upstream: {protocol: h2c}\n",
			"apps.a.health.service: must be UTF-8"},
		{app + "    health: {grpc: true, interval: 1ms}\n    upstream: {protocol: h2c}\n", "apps.a.health.interval"},
	} {
		if _, err := Parse([]byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v; want %q", tc.src, err, tc.err)
		}
	}
	for _, proto := range []string{"h2c", "h2"} {
		cfg, err := Parse([]byte(app + "    health: {grpc: true, service: pkg.Echo}\n    upstream: {protocol: " + proto + "}\n"))
		if err != nil {
			t.Fatalf("grpc over %s: %v", proto, err)
		}
		if h := cfg.Apps["a"].Health; !h.On() || !h.GRPC || h.Service != "pkg.Echo" || h.Path != "" {
			t.Errorf("grpc over %s: %+v; want on, grpc, service pkg.Echo, no path", proto, h)
		}
	}
	if _, err := ParseApp("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:9"],"health":{"grpc":true}}`)); err == nil ||
		!strings.Contains(err.Error(), "apps.a.health.grpc: ") {
		t.Errorf("stored http1 app with grpc: err = %v", err)
	}
	a, err := ParseApp("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:9"],"health":{"grpc":true,"service":"s"},"upstream":{"protocol":"h2c"}}`))
	if err != nil || !a.Health.GRPC || a.Health.Service != "s" {
		t.Fatalf("stored h2c app with grpc: %+v, %v", a, err)
	}
	if cfg, err := Parse([]byte(app)); err != nil || cfg.Apps["a"].Health.On() {
		t.Errorf("an app without health: on = %v, %v; want off", cfg.Apps["a"].Health.On(), err)
	}
}
