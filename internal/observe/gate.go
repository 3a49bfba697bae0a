package observe

import "github.com/prometheus/client_golang/prometheus"

// The help of the refusal counters, one definition for the proxy's
// registry and a gate's collector.
const (
	rejectedHelp = "Requests refused by a limit, by app and reason (the Levee-Reject header)."
	shadowedHelp = "Requests a shadowed limit (limits.shadow) would have refused and let through, by app and reason."
)

var (
	gateRejectedDesc = prometheus.NewDesc("levee_rejected_total", rejectedHelp, []string{"app", "reason"}, nil)
	gateShadowedDesc = prometheus.NewDesc("levee_shadow_rejected_total", shadowedHelp, []string{"app", "reason"}, nil)
)

// GateCounts is the state of an admission gate (package admission's) as
// GateCollector reports it.
type GateCounts struct {
	InFlight, Queued, Limit int
	Rejected, Shadowed      map[string]uint64
}

// GateCollector reports a gate under the proxy's own metric names and
// help, labelled app: levee_inflight, levee_queue_length,
// levee_concurrency_limit, levee_rejected_total and
// levee_shadow_rejected_total by reason. read is called at each scrape.
// So a dashboard or an alert written for levee reads a service's gate
// unchanged.
func GateCollector(app string, read func() GateCounts) prometheus.Collector {
	return &gateCollector{app: app, read: read}
}

type gateCollector struct {
	app  string
	read func() GateCounts
}

func (c *gateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inflightDesc, queueDesc, limitDesc, gateRejectedDesc, gateShadowedDesc} {
		ch <- d
	}
}

func (c *gateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.read()
	ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(g.InFlight), c.app)
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(g.Queued), c.app)
	ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(g.Limit), c.app)
	for r, n := range g.Rejected {
		ch <- prometheus.MustNewConstMetric(gateRejectedDesc, prometheus.CounterValue, float64(n), c.app, r)
	}
	for r, n := range g.Shadowed {
		ch <- prometheus.MustNewConstMetric(gateShadowedDesc, prometheus.CounterValue, float64(n), c.app, r)
	}
}
