// Package admissionprom exports an admission.Gate to Prometheus under the
// levee proxy's own metric names, so a dashboard or an alert written for
// levee reads a service's gate unchanged. It is apart from package
// admission so that a service that does not use Prometheus does not link
// it.
package admissionprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/admission"
	"github.com/leveeproxy/levee/internal/observe"
)

// Collector returns a Prometheus collector of g labelled app="name":
// levee_inflight, levee_queue_length, levee_concurrency_limit, and
// levee_rejected_total and levee_shadow_rejected_total by reason. It reads
// g's Stats at each scrape. Register it once per gate:
//
//	prometheus.MustRegister(admissionprom.Collector("checkout", gate))
func Collector(name string, g *admission.Gate) prometheus.Collector {
	return observe.GateCollector(name, func() observe.GateCounts {
		s := g.Stats()
		return observe.GateCounts{InFlight: s.Running, Queued: s.Queued, Limit: s.Limit,
			Rejected: byName(s.Rejected), Shadowed: byName(s.Shadowed)}
	})
}

func byName(m map[admission.Reason]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for r, n := range m {
		out[string(r)] = n
	}
	return out
}
