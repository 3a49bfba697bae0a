package server

import (
	"iter"
	"time"

	"github.com/leveeproxy/levee/internal/ascii"
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

// tracedReq is what the trace of a request reads of it: an exchange's,
// or a request the event loop answers (loopHead).
type tracedReq interface {
	// traceState is the request's trace state, held by the exchange;
	// incomingTrace reads the client's trace context; describe adds the
	// span's tracestate and returns what else it records of the request.
	traceState() *trace.Request
	incomingTrace() trace.Incoming
	describe(sp *trace.Span) trace.HTTPServer
	rejected() bool
}

// resumeTrace is beginTrace for a request whose trace the event loop
// began (front) with the same snapshot: its state, with the stages the
// loop marked, goes on in e. nil when tracing is off (from is then off
// too, and e's state is reset with it).
func resumeTrace[E tracedReq](e E, from *trace.Request) *trace.Request {
	r := e.traceState()
	*r = *from
	if !r.On() {
		return nil
	}
	return r
}

// incomingOf gathers into in the trace context of an HTTP/1.1 request's
// fields (views: valid while they are).
func incomingOf(in *trace.Incoming, fields iter.Seq2[[]byte, []byte]) {
	*in = trace.Incoming{}
	for k, v := range fields {
		switch {
		case ascii.EqualFold(k, "traceparent"):
			in.Count++
			in.Traceparent = b2s(v)
		case ascii.EqualFold(k, "tracestate"):
			in.State.Add(v)
		}
	}
}

// addTraceStates adds the tracestate fields of an HTTP/1.1 request to
// sp, unless r dropped them.
func addTraceStates(sp *trace.Span, r *trace.Request, fields iter.Seq2[[]byte, []byte]) {
	if r.DropTracestate() {
		return
	}
	for k, v := range fields {
		if ascii.EqualFold(k, "tracestate") {
			sp.AddTraceState(b2s(v))
		}
	}
}

// beginTrace starts the trace state of a routed request that arrived at
// now; nil when tracing is off (every trace.Request method is then a no-op,
// and the engine passes the client's trace headers on as sent).
func beginTrace[E tracedReq](snap *snapshot, e E, now time.Time) *trace.Request {
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
func endTrace[E tracedReq](snap *snapshot, rt *route, e E, code int, end time.Time) {
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
