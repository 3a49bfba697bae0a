// Package observe holds levee's metrics and its rate-limited logging. It is
// written for the request path: recording costs no allocation per request
// after an app's label values are bound, and no log call blocks for long.
package observe

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is levee's metric set on its own registry (never the global one,
// so tests and several servers in one process do not collide).
type Metrics struct {
	Registry *prometheus.Registry

	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	rejected        *prometheus.CounterVec
	backendRequests *prometheus.CounterVec
	connsRejected   *prometheus.CounterVec
	reloads         *prometheus.CounterVec
	logsSuppressed  prometheus.Counter
}

// AppGauges reports per-app gauges read at scrape time, so the request path
// never updates them.
type AppGauges interface {
	// EachApp calls fn with every current app's name, in-flight count, queue
	// length and concurrency limit.
	EachApp(fn func(app string, inflight, queued, limit int))
}

// NewMetrics registers levee's metrics. gauges may be nil.
func NewMetrics(gauges AppGauges) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_requests_total", Help: "Requests answered, by app and status code.",
		}, []string{"app", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "levee_request_duration_seconds",
			Help:    "Time from request headers read to response handler done, by app.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"app"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_rejected_total", Help: "Requests refused by a limit, by app and reason (the Levee-Reject header).",
		}, []string{"app", "reason"}),
		backendRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_backend_requests_total", Help: "Requests sent to each backend.",
		}, []string{"app", "backend"}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_connections_rejected_total", Help: "Client connections closed at accept because a listener was at server.max_conns.",
		}, []string{"listener"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_config_reloads_total", Help: "Config reloads by result (ok or error).",
		}, []string{"result"}),
		logsSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_log_lines_suppressed_total", Help: "Error log lines dropped by the log rate limit.",
		}),
	}
	m.Registry.MustRegister(m.requests, m.duration, m.rejected, m.backendRequests,
		m.connsRejected, m.reloads, m.logsSuppressed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if gauges != nil {
		m.Registry.MustRegister(&appCollector{gauges: gauges})
	}
	return m
}

// App returns the metrics of one app with its label bound, for the request path.
func (m *Metrics) App(app string) *AppMetrics {
	return &AppMetrics{m: m, app: app, duration: m.duration.WithLabelValues(app)}
}

// ConnRejected counts a connection closed at accept on listener.
func (m *Metrics) ConnRejected(listener string) { m.connsRejected.WithLabelValues(listener).Inc() }

// Reload counts a config reload attempt.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("ok").Inc()
	} else {
		m.reloads.WithLabelValues("error").Inc()
	}
}

// BackendCounter returns the request counter for one backend of app.
func (m *Metrics) BackendCounter(app, backend string) prometheus.Counter {
	return m.backendRequests.WithLabelValues(app, backend)
}

// AppMetrics are one app's request metrics with labels pre-bound.
// Safe for concurrent use.
type AppMetrics struct {
	m        *Metrics
	app      string
	duration prometheus.Observer
	// codes caches the counter child of each status 100..599 once it is first
	// used, so only codes that happened appear as series.
	codes [500]atomic.Pointer[counter]
	// rejected caches the counter child of each rejection reason.
	rejected sync.Map // reason → prometheus.Counter
}

type counter struct{ prometheus.Counter }

// Observe records one answered request.
func (a *AppMetrics) Observe(code int, seconds float64) {
	if code >= 100 && code < 600 {
		c := a.codes[code-100].Load()
		if c == nil {
			c = &counter{a.m.requests.WithLabelValues(a.app, strconv.Itoa(code))}
			a.codes[code-100].Store(c)
		}
		c.Inc()
	} else {
		a.m.requests.WithLabelValues(a.app, strconv.Itoa(code)).Inc()
	}
	a.duration.Observe(seconds)
}

// Rejected counts a request refused for reason.
func (a *AppMetrics) Rejected(reason string) {
	if c, ok := a.rejected.Load(reason); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := a.rejected.LoadOrStore(reason, a.m.rejected.WithLabelValues(a.app, reason))
	c.(prometheus.Counter).Inc()
}

type appCollector struct{ gauges AppGauges }

var (
	inflightDesc = prometheus.NewDesc("levee_inflight", "Requests of an app in flight to its backends.", []string{"app"}, nil)
	queueDesc    = prometheus.NewDesc("levee_queue_length", "Requests of an app waiting for a concurrency slot.", []string{"app"}, nil)
	limitDesc    = prometheus.NewDesc("levee_concurrency_limit", "An app's current concurrency limit.", []string{"app"}, nil)
)

func (c *appCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- queueDesc
	ch <- limitDesc
}

func (c *appCollector) Collect(ch chan<- prometheus.Metric) {
	c.gauges.EachApp(func(app string, inflight, queued, limit int) {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(inflight), app)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(queued), app)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(limit), app)
	})
}

// Forget drops the series of an app removed from the config.
func (m *Metrics) Forget(app string) {
	l := prometheus.Labels{"app": app}
	m.requests.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.rejected.DeletePartialMatch(l)
	m.backendRequests.DeletePartialMatch(l)
}
