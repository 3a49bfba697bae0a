// Package observe holds levee's metrics and its rate-limited logging. It is
// written for the request path: recording costs no allocation per request
// after an app's label values are bound, and no log call blocks for long.
package observe

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/topk"
)

// Metrics is levee's metric set on its own registry (never the global one,
// so tests and several servers in one process do not collide).
type Metrics struct {
	Registry *prometheus.Registry

	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
	rejected        *prometheus.CounterVec
	shadowed        *prometheus.CounterVec // see shadow.go
	backendRequests *prometheus.CounterVec
	connsRejected   *prometheus.CounterVec
	h2FloodClosed   *prometheus.CounterVec
	reloads         *prometheus.CounterVec
	logsSuppressed  prometheus.Counter
	retries         *prometheus.CounterVec
	retryExhausted  *prometheus.CounterVec
	host            *hostMetrics
	clk             clock.Clock // what the live rates count by
}

// AppGauges reports per-app gauges read at scrape time, so the request path
// never updates them.
type AppGauges interface {
	// EachApp calls fn with the state of every current app.
	EachApp(fn func(AppStats))
}

// AppStats is one app's state at scrape time.
type AppStats struct {
	Name     string `json:"app"`
	InFlight int    `json:"inflight"`
	Queued   int    `json:"queued"`
	Limit    int    `json:"concurrency_limit"`
	// Overloaded is whether the app's queue is overloaded (CoDel): sheddable
	// requests refused at once, waits cut short, served last in first out.
	Overloaded bool `json:"queue_overloaded"`
	// Imbalance is max/mean of the weight-normalised share of requests among
	// healthy backends over the last window (1 is even; 0: no data).
	Imbalance float64 `json:"imbalance"`
	// ImbalanceAlert is whether Imbalance is above the app's threshold.
	ImbalanceAlert bool           `json:"imbalance_alert"`
	Backends       []BackendStats `json:"backends"`
	// TopClients are the heaviest clients (nil when limits.client.top_k is 0).
	TopClients *topk.Clients `json:"top_clients,omitempty"`
	// Pool is the backend_limits state (nil when they are off).
	Pool *PoolStats `json:"backend_limits,omitempty"`
}

// PoolStats is an app's backend_limits state: requests at the backends
// under the inflight limit (0: off) and the pool's rate (0: off).
type PoolStats struct {
	InFlight      int     `json:"inflight"`
	Queued        int     `json:"queued"`
	InflightLimit int     `json:"inflight_limit"`
	Rate          float64 `json:"rate"`
}

// BackendStats is one backend's state at scrape time.
type BackendStats struct {
	Addr     string        `json:"addr"`
	Weight   int           `json:"weight"`
	Healthy  bool          `json:"healthy"`
	InFlight int64         `json:"inflight"`
	Latency  time.Duration `json:"latency_ns"` // decaying average
	Share    float64       `json:"share"`      // of the app's requests in the window
	Requests uint64        `json:"requests"`   // in the window
	// Conns are the connections to the backend's address now, shared by
	// every app with a backend there (the pool is per address).
	Conns ConnStats `json:"conns"`
}

// ConnStats are a backend address's connection pool, as the API shows it.
type ConnStats struct {
	Active    int64  `json:"active"` // carrying an exchange
	Idle      int64  `json:"idle"`
	Dials     uint64 `json:"dials"`     // since the pool was made
	Exchanges uint64 `json:"exchanges"` // requests written, since the pool was made
	// ReuseRatio is 1 - dials/exchanges: the share of requests that found
	// a connection open (0 before any exchange).
	ReuseRatio float64 `json:"reuse_ratio"`
}

// NewConnStats is c as the API shows it.
func NewConnStats(c ConnCounts) ConnStats {
	s := ConnStats{Active: max(c.Open-c.Idle, 0), Idle: c.Idle, Dials: c.Dials, Exchanges: c.Exchanges}
	if c.Exchanges > 0 {
		s.ReuseRatio = max(1-float64(c.Dials)/float64(c.Exchanges), 0)
	}
	return s
}

// NewMetrics registers levee's metrics. gauges may be nil.
func NewMetrics(gauges AppGauges) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		clk:      clock.Real{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_requests_total", Help: "Requests answered, by app and status code.",
		}, []string{"app", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "levee_request_duration_seconds",
			Help:    "Time from request headers read to response handler done, by app.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"app"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "levee_queue_wait_seconds",
			Help:    "Time an admitted request waited in its app's queue for a concurrency slot; requests admitted at once are not observed.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"app"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_rejected_total", Help: rejectedHelp,
		}, []string{"app", "reason"}),
		shadowed: newShadowVec(),
		backendRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_backend_requests_total", Help: "Requests sent to each backend.",
		}, []string{"app", "backend"}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_connections_rejected_total", Help: "Client connections closed at accept, by listener and reason: max-conns (server.max_conns) or conns-per-ip (server.max_conns_per_ip).",
		}, []string{"listener", "reason"}),
		h2FloodClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_h2_flood_closed_total", Help: "HTTP/2 client connections closed with GOAWAY ENHANCE_YOUR_CALM for a frame flood, by the bound crossed.",
		}, []string{"reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_config_reloads_total", Help: "Config reloads by result (ok or error).",
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_retries_total", Help: "Requests tried again on another backend (retry.on), by app.",
		}, []string{"app"}),
		retryExhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_retry_budget_exhausted_total", Help: "Retries not made because the app's retry.budget was spent.",
		}, []string{"app"}),
		logsSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_log_lines_suppressed_total", Help: "Error log lines dropped by the log rate limit.",
		}),
	}
	m.Registry.MustRegister(m.requests, m.duration, m.queueWait, m.rejected, m.shadowed, m.backendRequests,
		m.connsRejected, m.h2FloodClosed, m.reloads, m.logsSuppressed, m.retries, m.retryExhausted,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.host = newHostMetrics(m.Registry)
	if gauges != nil {
		m.Registry.MustRegister(&appCollector{gauges: gauges})
	}
	return m
}

// SetClock makes the live rates count by clk (the server's, in tests a
// fake one); call it before any app's metrics are used.
func (m *Metrics) SetClock(clk clock.Clock) { m.clk = clk }

// App returns the metrics of one app, for the request path. Its series are
// made on their first use (an app that never answers a 404 has no 404
// series), so a cold app costs a few hundred bytes until it serves.
func (m *Metrics) App(app string) *AppMetrics {
	return &AppMetrics{m: m, app: app}
}

// ConnRejected counts a connection closed at accept on listener, for
// reason (max-conns or conns-per-ip).
func (m *Metrics) ConnRejected(listener, reason string) {
	m.connsRejected.WithLabelValues(listener, reason).Inc()
}

// H2FloodClosed counts an HTTP/2 connection closed by the flood guard.
func (m *Metrics) H2FloodClosed(reason string) { m.h2FloodClosed.WithLabelValues(reason).Inc() }

// Reload counts a config reload attempt.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("ok").Inc()
	} else {
		m.reloads.WithLabelValues("error").Inc()
	}
}

// AppMetrics are one app's request metrics, each series bound on its first
// use and cached, so that recording allocates nothing after warm-up.
// Safe for concurrent use.
type AppMetrics struct {
	m   *Metrics
	app string
	// duration and queueWait (only requests that waited for their slot).
	duration  lazyObserver
	queueWait lazyObserver
	// codes caches the counter child of each status code once it is first
	// used, so only codes that happened appear as series.
	codes codeCounters
	// rejected caches the counter child of each rejection reason.
	rejected sync.Map // reason → prometheus.Counter
	// Live is the app's recent traffic for the admin API. Requests are
	// counted by the caller (Live.Request, with the time it has);
	// refusals and queue waits by Rejected and QueueWait.
	Live Live
	// shadowed caches the shadowCounter per reason (reason →
	// *shadowCounter), made on the first: most apps shadow no limit.
	shadowed atomic.Pointer[sync.Map]
	// series are the series bound so far, for Forget.
	series boundSeries
}

// Observe records one answered request.
func (a *AppMetrics) Observe(code int, seconds float64) {
	a.codeCounter(code).Inc()
	a.duration.get(a, a.m.duration).Observe(seconds)
}

// QueueWait records the time an admitted request waited for its
// concurrency slot; callers record only requests that waited.
func (a *AppMetrics) QueueWait(d time.Duration) {
	a.queueWait.get(a, a.m.queueWait).Observe(d.Seconds())
	a.Live.Waited(d, a.m.clk.Now())
}

// Rejected counts a request refused for reason.
func (a *AppMetrics) Rejected(reason string) {
	a.Live.Rejected(reason, a.m.clk.Now())
	if c, ok := a.rejected.Load(reason); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := a.rejected.LoadOrStore(reason, a.bindCounter(a.m.rejected, reason))
	c.(prometheus.Counter).Inc()
}

// BackendCounter returns the counter of the app's requests sent to backend
// addr (levee_backend_requests_total), bound on its first Inc.
func (a *AppMetrics) BackendCounter(addr string) *Counter {
	return &Counter{a: a, vec: a.m.backendRequests, label: addr}
}

// RetryCounters returns the app's counters of retries made and of retries
// the budget refused, bound on their first Inc.
func (a *AppMetrics) RetryCounters() (retries, exhausted *Counter) {
	return &Counter{a: a, vec: a.m.retries}, &Counter{a: a, vec: a.m.retryExhausted}
}

// Forget drops every series the app bound (an app removed from the config,
// or a stored app released): a map deletion each, however many apps there
// are. Requests still recording on a forgotten AppMetrics count into
// series no longer exported.
func (a *AppMetrics) Forget() { a.series.forget(a.app) }

type appCollector struct{ gauges AppGauges }

var (
	inflightDesc = prometheus.NewDesc("levee_inflight", "Requests of an app in flight to its backends.", []string{"app"}, nil)
	queueDesc    = prometheus.NewDesc("levee_queue_length", "Requests of an app waiting for a concurrency slot.", []string{"app"}, nil)
	limitDesc    = prometheus.NewDesc("levee_concurrency_limit", "An app's current concurrency limit.", []string{"app"}, nil)
	overloadDesc = prometheus.NewDesc("levee_queue_overloaded",
		"1 while an app's queue is overloaded: its shortest wait stayed above limits.queue.target for limits.queue.interval.", []string{"app"}, nil)
	imbalanceDesc = prometheus.NewDesc("levee_backend_imbalance",
		"Max/mean of the weight-normalised share of requests among an app's healthy backends over the last minute (1 is even).", []string{"app"}, nil)
	alertDesc = prometheus.NewDesc("levee_backend_imbalance_alert",
		"1 while levee_backend_imbalance is above the app's balance.imbalance_alert.", []string{"app"}, nil)
	beInflightDesc   = prometheus.NewDesc("levee_backend_inflight", "Requests in flight to one backend.", []string{"app", "backend"}, nil)
	beLatencyDesc    = prometheus.NewDesc("levee_backend_latency_seconds", "A backend's decaying average latency, as the balancer sees it.", []string{"app", "backend"}, nil)
	beHealthyDesc    = prometheus.NewDesc("levee_backend_healthy", "1 if the backend is healthy and not ejected.", []string{"app", "backend"}, nil)
	beShareDesc      = prometheus.NewDesc("levee_backend_share", "A backend's share of its app's requests over the last minute.", []string{"app", "backend"}, nil)
	poolInflightDesc = prometheus.NewDesc("levee_pool_inflight", "Requests of an app at its backends under backend_limits.inflight.", []string{"app"}, nil)
	poolQueueDesc    = prometheus.NewDesc("levee_pool_queue_length", "Requests of an app waiting for a backend_limits.inflight slot.", []string{"app"}, nil)
	poolLimitDesc    = prometheus.NewDesc("levee_pool_inflight_limit", "An app's backend_limits.inflight (0: off).", []string{"app"}, nil)
	poolRateDesc     = prometheus.NewDesc("levee_pool_rate_limit", "An app's backend_limits.rate in requests per second (0: off).", []string{"app"}, nil)
	topRequestsDesc  = prometheus.NewDesc("levee_top_client_requests",
		"Requests of each of an app's heaviest clients (at most limits.client.top_k) over the last minute (the admin API's 1m window: 30 to 65 s); an upper bound, over by at most the app's requests in that time / top_k.",
		[]string{"app", "client"}, nil)
	topRejectedDesc = prometheus.NewDesc("levee_top_client_rejected",
		"Requests refused by a limit, of each of an app's most refused clients (at most limits.client.top_k), over the last minute; an upper bound as levee_top_client_requests.",
		[]string{"app", "client"}, nil)
)

func (c *appCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- queueDesc
	ch <- limitDesc
	ch <- overloadDesc
	ch <- imbalanceDesc
	ch <- alertDesc
	ch <- beInflightDesc
	ch <- beLatencyDesc
	ch <- beHealthyDesc
	ch <- beShareDesc
	ch <- poolInflightDesc
	ch <- poolQueueDesc
	ch <- poolLimitDesc
	ch <- poolRateDesc
	ch <- topRequestsDesc
	ch <- topRejectedDesc
}

func (c *appCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c.gauges.EachApp(func(a AppStats) {
		gauge(inflightDesc, float64(a.InFlight), a.Name)
		gauge(queueDesc, float64(a.Queued), a.Name)
		gauge(limitDesc, float64(a.Limit), a.Name)
		gauge(overloadDesc, b2f(a.Overloaded), a.Name)
		gauge(imbalanceDesc, a.Imbalance, a.Name)
		gauge(alertDesc, b2f(a.ImbalanceAlert), a.Name)
		for _, b := range a.Backends {
			gauge(beInflightDesc, float64(b.InFlight), a.Name, b.Addr)
			gauge(beLatencyDesc, b.Latency.Seconds(), a.Name, b.Addr)
			gauge(beHealthyDesc, b2f(b.Healthy), a.Name, b.Addr)
			gauge(beShareDesc, b.Share, a.Name, b.Addr)
		}
		if p := a.Pool; p != nil {
			gauge(poolInflightDesc, float64(p.InFlight), a.Name)
			gauge(poolQueueDesc, float64(p.Queued), a.Name)
			gauge(poolLimitDesc, float64(p.InflightLimit), a.Name)
			gauge(poolRateDesc, p.Rate, a.Name)
		}
		if a.TopClients != nil {
			topGauges(ch, topRequestsDesc, a.Name, a.TopClients.Requests)
			topGauges(ch, topRejectedDesc, a.Name, a.TopClients.Rejected)
		}
	})
}

// topGauges reports heavy clients as gauges. Client keys come from
// requests: they are made valid UTF-8, and a key that then repeats one
// already reported (heaviest first) is left out, as the registry refuses
// two series with the same labels.
func topGauges(ch chan<- prometheus.Metric, d *prometheus.Desc, app string, top []topk.Entry) {
	seen := make(map[string]struct{}, len(top))
	for _, e := range top {
		client := strings.ToValidUTF8(e.Key, "\uFFFD")
		if _, dup := seen[client]; dup {
			continue
		}
		seen[client] = struct{}{}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(e.Count), app, client)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// BackendUnclean registers levee_backend_conns_unclean_total: backend
// connections closed after an exchange that did not end cleanly, by reason
// (forward.UncleanReasons), read through count.
func (m *Metrics) BackendUnclean(reasons []string, count func(reason string) uint64) {
	for _, r := range reasons {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "levee_backend_conns_unclean_total",
			Help:        "Backend connections closed, not reused, because an exchange did not end cleanly: bytes left after a response (after-end, bodiless-body), unsolicited bytes on an idle connection, a response before the whole request was written (early-response), a 101 to a request without Upgrade (unasked-switch).",
			ConstLabels: prometheus.Labels{"reason": r},
		}, func() float64 { return float64(count(r)) }))
	}
}

// UpgradeStateDropped registers the count of apps whose limits' state an
// upgrade handed over was dropped unused (apps.Table's pending state).
func (m *Metrics) UpgradeStateDropped(count func() uint64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "levee_upgrade_state_dropped_total",
		Help: "Apps whose limits' state an upgrade handed over was dropped unused: the new levee had not loaded the app (a catalog app) before that state had settled, or more such apps than catalog.cache.max_apps were waiting.",
	}, func() float64 { return float64(count()) }))
}

// SpillStats is what the spill metrics read; *spill.Budget is one.
type SpillStats interface {
	Used() int64
	Max() int64
	Spilled() uint64
	Refused(reason string) uint64
}

// Spill registers the metrics of server.spill: the bytes spilled responses
// hold on disk now, the budget, the responses spilled, and those that
// streamed instead, by reason (see package spill).
func (m *Metrics) Spill(st SpillStats, reasons []string) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_spill_bytes",
			Help: "Bytes held now on disk for responses spilled for slow clients (limits.response_spill)."},
			func() float64 { return float64(st.Used()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_spill_budget_bytes",
			Help: "server.spill.budget: the most bytes all spilled responses may hold on disk at once."},
			func() float64 { return float64(st.Max()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "levee_spilled_total",
			Help: "Responses longer than limits.response_buffer held on disk, so that their slot and backend connection went back when the backend finished."},
			func() float64 { return float64(st.Spilled()) }))
	for _, r := range reasons {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "levee_spill_refused_total",
			Help:        "Responses longer than limits.response_buffer that streamed, holding their slot, instead of spilling: off (no budget or response_spill 0), size (over limits.response_spill), budget (server.spill.budget spent), error (the file could not be made or written).",
			ConstLabels: prometheus.Labels{"reason": r},
		}, func() float64 { return float64(st.Refused(r)) }))
	}
}

// Buffers registers the metrics of server.buffer_memory: the bytes held in
// request and response buffers, the budget, and how often a buffer could
// not grow (its request streamed instead).
func (m *Metrics) Buffers(used, max func() int64, short func() uint64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_buffer_bytes",
			Help: "Bytes held now in request and response buffers (limits.request_buffer, limits.response_buffer)."},
			func() float64 { return float64(used()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_buffer_budget_bytes",
			Help: "server.buffer_memory: the most bytes all buffers may hold at once."},
			func() float64 { return float64(max()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "levee_buffer_short_total",
			Help: "Times a request or response buffer could not grow because server.buffer_memory was spent; that request streamed instead."},
			func() float64 { return float64(short()) }))
}
