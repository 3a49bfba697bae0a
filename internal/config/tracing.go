package config

import (
	"net/url"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Tracing exports one OpenTelemetry span per request over OTLP/HTTP; off
// while Endpoint is empty. The W3C trace context of a request reaches its
// backend either way (docs/config.md).
type Tracing struct {
	// Endpoint is the OTLP/HTTP base URL; spans go to {endpoint}/v1/traces.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of requests without a sampled or unsampled
	// parent that are traced; a client's sampled flag is always followed.
	SampleRatio float64 `yaml:"sample_ratio"`
	// RefusalsPerSecond bounds the refused requests traced, sampled or not.
	RefusalsPerSecond int `yaml:"refusals_per_second"`
	// ServiceName is the service.name of levee's spans.
	ServiceName string `yaml:"service_name"`
	// Timeout bounds one export request.
	Timeout Duration `yaml:"timeout"`
	// Headers are sent with every export (an API key, a tenant).
	Headers map[string]string `yaml:"headers"`
}

// Tracing defaults; docs/config.md states them.
const (
	DefaultSampleRatio       = 0.01
	DefaultRefusalsPerSecond = 10
	DefaultServiceName       = "levee"
	DefaultTracingTimeout    = 10 * time.Second
)

// DefaultTracing is tracing off, with every other default filled in.
func DefaultTracing() Tracing {
	return Tracing{SampleRatio: DefaultSampleRatio, RefusalsPerSecond: DefaultRefusalsPerSecond,
		ServiceName: DefaultServiceName, Timeout: Duration(DefaultTracingTimeout)}
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.Endpoint != "" }

func (t *Tracing) validate(errs *Errors) {
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		switch {
		case err != nil:
			errs.add("tracing.endpoint", "%q is not a URL: %v", t.Endpoint, err)
		case u.Scheme != "http" && u.Scheme != "https":
			errs.add("tracing.endpoint", "want an http:// or https:// URL, got %q", t.Endpoint)
		case u.Host == "":
			errs.add("tracing.endpoint", "want a URL with a host, got %q", t.Endpoint)
		case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
			errs.add("tracing.endpoint", "want a URL without user, query or fragment, got %q", t.Endpoint)
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		errs.add("tracing.sample_ratio", "must be 0..1 (got %g)", t.SampleRatio)
	}
	within(errs, "tracing.refusals_per_second", t.RefusalsPerSecond, 0, 100_000)
	if t.ServiceName == "" || len(t.ServiceName) > 255 {
		errs.add("tracing.service_name", "must be 1..255 characters (got %d)", len(t.ServiceName))
	}
	if t.Timeout < Duration(time.Millisecond) || t.Timeout > Duration(time.Minute) {
		errs.add("tracing.timeout", "must be 1ms..1m (got %s)", t.Timeout)
	}
	for k, v := range t.Headers {
		if !httpguts.ValidHeaderFieldName(k) {
			errs.add("tracing.headers", "%q is not a header name", k)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			errs.add("tracing.headers."+k, "a header value may not hold control characters (CR, LF, NUL)")
		}
	}
}
