package server

import (
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
	sp.DescribeHTTPServer(rt.app.Name, code, &v)
	snap.tracer.export.Enqueue(sp)
}
