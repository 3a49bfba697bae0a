package observe

import "github.com/prometheus/client_golang/prometheus"

// hostMetrics say how the host and the instance lock bend every limit.
type hostMetrics struct {
	role    *prometheus.GaugeVec
	factor  prometheus.Gauge
	signals *prometheus.GaugeVec
}

func newHostMetrics(reg *prometheus.Registry) *hostMetrics {
	h := &hostMetrics{
		role: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_instance_role",
			Help: `1 for this instance's role: active (holds the instance lock) or unexpected (another levee holds it; limits are scaled to instance.strict_fraction).`,
		}, []string{"role"}),
		factor: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "levee_overload_factor",
			Help: "What every app's concurrency and rate limits are multiplied by because the host is hot (1: as configured).",
		}),
		signals: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_overload_signal",
			Help: "The overload monitor's last reading of each signal: cpu and memory as shares, load per CPU, goroutines, gc_pause in seconds (NaN: unreadable).",
		}, []string{"signal"}),
	}
	h.factor.Set(1)
	h.role.WithLabelValues("active").Set(1)
	h.role.WithLabelValues("unexpected").Set(0)
	reg.MustRegister(h.role, h.factor, h.signals)
	return h
}

// SetInstanceRole reports whether this instance is the active one.
func (m *Metrics) SetInstanceRole(unexpected bool) {
	m.host.role.WithLabelValues("active").Set(b2f(!unexpected))
	m.host.role.WithLabelValues("unexpected").Set(b2f(unexpected))
}

// SetOverloadFactor reports the overload factor in force.
func (m *Metrics) SetOverloadFactor(f float64) { m.host.factor.Set(f) }

// OverloadReading is one reading of the host for levee_overload_signal.
type OverloadReading struct {
	CPU            float64 `json:"cpu"`
	Load           float64 `json:"load"`
	Memory         float64 `json:"memory"`
	Goroutines     float64 `json:"goroutines"`
	GCPauseSeconds float64 `json:"gc_pause_seconds"`
}

// SetOverloadReading reports the monitor's last reading.
func (m *Metrics) SetOverloadReading(r OverloadReading) {
	m.host.signals.WithLabelValues("cpu").Set(r.CPU)
	m.host.signals.WithLabelValues("load").Set(r.Load)
	m.host.signals.WithLabelValues("memory").Set(r.Memory)
	m.host.signals.WithLabelValues("goroutines").Set(r.Goroutines)
	m.host.signals.WithLabelValues("gc_pause").Set(r.GCPauseSeconds)
}
