package server

import (
	"net"
	"strconv"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/trace"
)

// tracer is tracing as one config has it, read from the snapshot; nil
// when tracing is off, which the request path checks once.
type tracer struct {
	sampler  trace.Sampler
	refusals *trace.RefusalLimiter
	ids      trace.IDs
	export   *trace.Exporter
}

// applyTracing points the exporter at cfg's endpoint and returns the
// snapshot's tracer (nil: off). The refusal bucket is kept while its rate
// stays, so a reload never hands out a fresh burst. Callers hold s.mu.
func (s *Server) applyTracing(cfg config.Tracing) *tracer {
	if !cfg.Enabled() {
		s.exporter.SetConfig(trace.ExportConfig{})
		return nil
	}
	s.exporter.SetConfig(trace.ExportConfig{URL: trace.TracesURL(cfg.Endpoint), Headers: cfg.Headers,
		Timeout: cfg.Timeout.D(), ServiceName: cfg.ServiceName})
	refusals := s.refusals.Apply(cfg.RefusalsPerSecond, trace.NewRefusalLimiter, nil)
	return &tracer{sampler: trace.NewSampler(cfg.SampleRatio), refusals: refusals, export: s.exporter}
}

// beginTrace starts the trace state of a routed request that arrived at
// now; nil when tracing is off (every trace.Request method is then a no-op,
// and the engine passes the client's trace headers on as sent).
func beginTrace[E exchange](snap *snapshot, e E, now time.Time) *trace.Request {
	r := e.traceState()
	if snap.tracer == nil {
		r.Reset()
		return nil
	}
	// Returned by value: a pointer through the generic call would escape.
	in := e.incomingTrace()
	r.Begin(snap.tracer.sampler, snap.tracer.ids, now, &in)
	return r
}

// spanView is what a span records of a request that only its engine can
// read; views, valid until the request is done.
type spanView struct {
	method, path, scheme, host, proto, client, userAgent string
	reject, levErr                                       string // the answer's Levee-Reject and Levee-Error
}

// endTrace exports the span of a request that ended at end with code, if
// it is sampled, or refused while the refusal bucket has a token.
func endTrace[E exchange](snap *snapshot, rt *route, e E, code int, end time.Time) {
	r := e.traceState()
	if snap.tracer == nil || !r.On() || !r.Export(e.rejected(), end, snap.tracer.refusals) {
		return
	}
	sp := trace.NewSpan()
	r.Fill(sp, end)
	v := e.describe(sp)
	describeSpan(sp, rt.app.Name, code, &v)
	snap.tracer.export.Enqueue(sp)
}

// describeSpan writes the attributes of the OpenTelemetry semantic
// conventions for an HTTP server span, and levee's own.
func describeSpan(sp *trace.Span, app string, code int, v *spanView) {
	if knownMethod(v.method) {
		sp.SetName(v.method, app)
		sp.Str("http.request.method", v.method)
	} else {
		// A method outside the standard set would make names of any cardinality.
		sp.SetName("HTTP", app)
		sp.Str("http.request.method", "_OTHER")
		sp.Str("http.request.method_original", v.method)
	}
	sp.Str("url.path", v.path)
	sp.Str("url.scheme", v.scheme)
	host, port := splitHostPort(v.host)
	sp.Str("server.address", host)
	if port > 0 {
		sp.Int("server.port", int64(port))
	}
	sp.Str("network.protocol.version", v.proto)
	if v.client != "" {
		sp.Str("client.address", v.client)
	}
	if v.userAgent != "" {
		sp.Str("user_agent.original", v.userAgent)
	}
	if code > 0 {
		sp.Int("http.response.status_code", int64(code))
	}
	sp.Str("levee.app", app)
	switch {
	case v.reject != "":
		sp.Str("error.type", v.reject)
		sp.Str("levee.reject", v.reject)
	case code >= 500 && v.levErr != "":
		sp.Str("error.type", v.levErr)
	case code >= 500:
		sp.Str("error.type", strconv.Itoa(code))
	}
	// Server spans: only a 5xx is an error, a 4xx is the client's.
	sp.Error = code >= 500
}

func knownMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}

// splitHostPort splits a Host header: the host (IPv6 without brackets),
// and the port, 0 when there is none.
func splitHostPort(hostport string) (string, int) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			return h, n
		}
		return h, 0
	}
	if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
		return hostport[1 : len(hostport)-1], 0
	}
	return hostport, 0
}
