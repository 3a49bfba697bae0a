package acme

import "github.com/prometheus/client_golang/prometheus"

// metrics count what the Manager did and refused.
type metrics struct {
	certs     *prometheus.CounterVec // result: issued, renewed
	failed    *prometheus.CounterVec // reason: the ACME problem type
	refused   *prometheus.CounterVec // reason: Reason*
	orders    prometheus.Counter
	fallbacks prometheus.Counter
	fleet     *prometheus.CounterVec // result: fleet*
	waits     prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		certs:   counterVec("levee_acme_certificates_total", "Certificates obtained by ACME (result: issued, renewed).", "result"),
		failed:  counterVec("levee_acme_failures_total", "ACME orders that failed, by the CA's problem type (connection, unauthorized, dns, rateLimited, ...; other).", "reason"),
		refused: counterVec("levee_acme_refused_total", "Certificates not ordered: unknown (no app claims the name), backoff, orders, certificates, failed-validations (a budget is spent), busy (issuance concurrency full).", "reason"),
		orders:  counter("levee_acme_orders_total", "ACME orders sent to the CA."),
		fallbacks: counter("levee_acme_first_wait_fallbacks_total",
			"Handshakes for an ACME name without a certificate that got the listener's certificate after tls.acme.first_wait."),
		waits: counter("levee_acme_handshake_waits_total",
			"Handshakes that waited on an issuance (or its load from the store): those for an ACME name this instance held no certificate for. A name with a certificate never waits."),
		fleet: counterVec("levee_acme_fleet_loads_total",
			"Certificates written by an instance of the fleet and told by the catalog's change feed (result: loaded, dropped: the queue was full, full: not cached here and the cache is full, failed).", "result"),
	}
}

// counterVec is the counter name, by one label.
func counterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// counter is the counter name.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// Collectors are the Manager's metrics, for the server's registry.
func (m *Manager) Collectors() []prometheus.Collector {
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "levee_acme_nearest_expiry_days",
		Help: "Days until the soonest expiry among the ACME certificates this instance holds (0 with none).",
	}, m.nearestExpiry)
	return []prometheus.Collector{m.m.certs, m.m.failed, m.m.refused, m.m.orders, m.m.fallbacks, m.m.fleet, m.m.waits, expiry}
}
