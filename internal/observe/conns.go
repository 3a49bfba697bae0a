package observe

import "github.com/prometheus/client_golang/prometheus"

// ConnCounts are one backend connection pool's counts at a scrape.
type ConnCounts struct {
	Open, Idle                              int64
	Dials, DialErrors, DialWaits, Exchanges uint64
}

// BackendConns registers the metrics of the backend connection pools, read
// at each scrape through each, which calls f once per pool with its
// backend address (pools at one address, as during a reload that changes
// upstream settings, are summed):
//
//   - levee_backend_conns{backend,state}: connections now, active or idle;
//   - levee_backend_dials_total{backend}, levee_backend_dial_errors_total,
//     levee_backend_dial_waits_total (dials that waited for upstream.dial_rate);
//   - levee_backend_exchanges_total{backend}: requests written on them.
//
// The reuse ratio is 1 - dials/exchanges over any window: at steady state
// levee dials at most once per 1,000 requests.
func (m *Metrics) BackendConns(each func(f func(addr string, c ConnCounts))) {
	m.Registry.MustRegister(&connCollector{each: each})
}

var (
	connsDesc = prometheus.NewDesc("levee_backend_conns",
		"Connections to a backend address now, by state (active: carrying an exchange; idle: in the pool).",
		[]string{"backend", "state"}, nil)
	dialsDesc = prometheus.NewDesc("levee_backend_dials_total",
		"Connections levee tried to open to a backend address (upgrades included).", []string{"backend"}, nil)
	dialErrorsDesc = prometheus.NewDesc("levee_backend_dial_errors_total",
		"Connections to a backend address that failed to open.", []string{"backend"}, nil)
	dialWaitsDesc = prometheus.NewDesc("levee_backend_dial_waits_total",
		"Dials to a backend address that waited for upstream.dial_rate (then dialled, took a connection given back, or gave up with 504).",
		[]string{"backend"}, nil)
	exchangesDesc = prometheus.NewDesc("levee_backend_exchanges_total",
		"Requests written to a backend address, on new and reused connections; 1 - dials/exchanges is the reuse ratio.",
		[]string{"backend"}, nil)
)

type connCollector struct {
	each func(f func(addr string, c ConnCounts))
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connsDesc
	ch <- dialsDesc
	ch <- dialErrorsDesc
	ch <- dialWaitsDesc
	ch <- exchangesDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	sums := map[string]ConnCounts{}
	c.each(func(addr string, n ConnCounts) {
		s := sums[addr]
		s.Open += n.Open
		s.Idle += n.Idle
		s.Dials += n.Dials
		s.DialErrors += n.DialErrors
		s.DialWaits += n.DialWaits
		s.Exchanges += n.Exchanges
		sums[addr] = s
	})
	for addr, s := range sums {
		ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(max(s.Open-s.Idle, 0)), addr, "active")
		ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(s.Idle), addr, "idle")
		ch <- prometheus.MustNewConstMetric(dialsDesc, prometheus.CounterValue, float64(s.Dials), addr)
		ch <- prometheus.MustNewConstMetric(dialErrorsDesc, prometheus.CounterValue, float64(s.DialErrors), addr)
		ch <- prometheus.MustNewConstMetric(dialWaitsDesc, prometheus.CounterValue, float64(s.DialWaits), addr)
		ch <- prometheus.MustNewConstMetric(exchangesDesc, prometheus.CounterValue, float64(s.Exchanges), addr)
	}
}
