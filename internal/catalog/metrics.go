package catalog

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics measure a Lazy catalog. A nil *Metrics measures nothing. One
// Metrics serves one Lazy.
type Metrics struct {
	misses       prometheus.Counter
	shedWaiters  prometheus.Counter
	shedSlots    prometheus.Counter
	evictions    prometheus.Counter
	loadErrors   prometheus.Counter
	composeFails prometheus.Counter
	changes      prometheus.Counter
	loadSeconds  prometheus.Histogram
	lag          prometheus.Gauge

	mu    sync.Mutex
	stats func() LazyStats
}

// NewMetrics registers the catalog's metrics with r.
func NewMetrics(r prometheus.Registerer) *Metrics {
	m := &Metrics{
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_catalog_misses_total",
			Help: "Lookups of a host in neither cache, sent to the loader."}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_catalog_evictions_total",
			Help: "Hosts evicted from the catalog cache (catalog.cache.max_apps)."}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_catalog_load_errors_total",
			Help: "Loads that failed or missed catalog.loader.timeout."}),
		composeFails: prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_catalog_invalid_apps_total",
			Help: "Stored apps skipped because their config did not compose."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_catalog_changes_total",
			Help: "Store changes applied by the watcher."}),
		loadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "levee_catalog_load_seconds",
			Help:    "Time to load one host from the store.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "levee_catalog_update_lag_seconds",
			Help: "From the write of the last change applied to its application."}),
	}
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "levee_catalog_shed_total",
		Help: "Cold lookups refused at once because the loader was saturated, by the bound that was full."}, []string{"bound"})
	m.shedSlots = shed.WithLabelValues("concurrency")
	m.shedWaiters = shed.WithLabelValues("waiters")
	gauge := func(name, help string, f func(LazyStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(m.read()) })
	}
	counter := func(name, help string, f func(LazyStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(m.read()) })
	}
	r.MustRegister(m.misses, shed, m.evictions, m.loadErrors, m.composeFails, m.changes, m.loadSeconds, m.lag,
		counter("levee_catalog_hits_total", "Lookups answered from the catalog cache.", func(s LazyStats) float64 { return float64(s.Hits) }),
		counter("levee_catalog_unknown_hits_total", "Lookups of a host cached as unknown (catalog.cache.unknown_ttl).", func(s LazyStats) float64 { return float64(s.UnknownHits) }),
		gauge("levee_catalog_cached_hosts", "Hosts in the catalog cache.", func(s LazyStats) float64 { return float64(s.Hosts) }),
		gauge("levee_catalog_cached_apps", "Apps composed for the cached hosts.", func(s LazyStats) float64 { return float64(s.Apps) }),
		gauge("levee_catalog_unknown_hosts", "Hosts cached as unknown.", func(s LazyStats) float64 { return float64(s.Unknown) }),
		gauge("levee_catalog_loads_inflight", "Loads running (at most catalog.loader.concurrency).", func(s LazyStats) float64 { return float64(s.InFlight) }),
		gauge("levee_catalog_load_waiters", "Lookups waiting for a load running (at most catalog.loader.max_waiters).", func(s LazyStats) float64 { return float64(s.Waiters) }),
		gauge("levee_catalog_version", "Store change version applied.", func(s LazyStats) float64 { return float64(s.Version) }),
	)
	return m
}

func (m *Metrics) bind(f func() LazyStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats = f
}

func (m *Metrics) read() LazyStats {
	m.mu.Lock()
	f := m.stats
	m.mu.Unlock()
	if f == nil {
		return LazyStats{}
	}
	return f()
}

func (m *Metrics) miss() {
	if m != nil {
		m.misses.Inc()
	}
}

func (m *Metrics) shed(bound string) {
	if m == nil {
		return
	}
	if bound == "waiters" {
		m.shedWaiters.Inc()
	} else {
		m.shedSlots.Inc()
	}
}

func (m *Metrics) evicted(n int) {
	if m != nil && n > 0 {
		m.evictions.Add(float64(n))
	}
}

func (m *Metrics) loaded(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.loadSeconds.Observe(d.Seconds())
	if err != nil {
		m.loadErrors.Inc()
	}
}

func (m *Metrics) composeFailed() {
	if m != nil {
		m.composeFails.Inc()
	}
}

func (m *Metrics) applied(n int, lag time.Duration) {
	if m == nil {
		return
	}
	m.changes.Add(float64(n))
	m.lag.Set(max(lag, 0).Seconds())
}
