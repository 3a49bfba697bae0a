package observe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/trace"
)

// TraceSpans exports the trace exporter's span counts.
func (m *Metrics) TraceSpans(stats func() trace.Stats) {
	counter := func(name, help string, v func(trace.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(stats())) })
	}
	m.Registry.MustRegister(
		counter("levee_trace_spans_exported_total", "Spans sent to tracing.endpoint and accepted.",
			func(s trace.Stats) uint64 { return s.Exported }),
		counter("levee_trace_spans_dropped_total", "Spans dropped because the export queue was full (or tracing was turned off while they waited).",
			func(s trace.Stats) uint64 { return s.Dropped }),
		counter("levee_trace_spans_failed_total", "Spans whose export failed after its retries.",
			func(s trace.Stats) uint64 { return s.Failed }))
}
