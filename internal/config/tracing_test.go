package config

import (
	"strings"
	"testing"
)

func TestTracingDefaultsOff(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Enabled() || cfg.Tracing.ServiceName != "levee" || cfg.Tracing.SampleRatio != DefaultSampleRatio {
		t.Fatalf("tracing defaults: %+v", cfg.Tracing)
	}
}

func TestTracingValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"tracing: {endpoint: http://127.0.0.1:4318, headers: {x-api-key: k}}", ""},
		{"tracing: {endpoint: https://otel.example.com/prefix/}", ""},
		{"tracing: {endpoint: 'localhost:4318'}", "tracing.endpoint: want an http:// or https:// URL"},
		{"tracing: {endpoint: 'http://'}", "tracing.endpoint: want a URL with a host"},
		{"tracing: {endpoint: 'http://a b'}", "tracing.endpoint: \"http://a b\" is not a URL"},
		{"tracing: {endpoint: 'http://h/?q=1'}", "tracing.endpoint: want a URL without user, query or fragment"},
		{"tracing: {sample_ratio: 1.5}", "tracing.sample_ratio: must be 0..1"},
		{"tracing: {sample_ratio: -0.1}", "tracing.sample_ratio: must be 0..1"},
		{"tracing: {refusals_per_second: -1}", "tracing.refusals_per_second"},
		{"tracing: {service_name: ''}", "tracing.service_name"},
		{"tracing: {timeout: 0s}", "tracing.timeout: must be 1ms..1m"},
		{"tracing: {headers: {'bad name': v}}", "tracing.headers: \"bad name\" is not a header name"},
		{"tracing: {samplerate: 1}", "tracing.samplerate"},
	} {
		_, err := Parse([]byte(tc.yaml))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
