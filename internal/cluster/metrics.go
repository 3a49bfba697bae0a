package cluster

import "github.com/prometheus/client_golang/prometheus"

var (
	degradedDesc = prometheus.NewDesc("levee_cluster_degraded",
		"1 while Redis is unreachable and each limit is this instance's fair share of it; 0 when limits are cluster-wide.", nil, nil)
	liveDesc = prometheus.NewDesc("levee_cluster_instances",
		"Live levee instances sharing the limits, as last learned from their heartbeats in Redis.", nil, nil)
	callsDesc = prometheus.NewDesc("levee_cluster_redis_calls_total",
		"Redis round trips made for limits and heartbeats.", nil, nil)
	failuresDesc = prometheus.NewDesc("levee_cluster_redis_errors_total",
		"Redis calls that failed or passed their deadline.", nil, nil)
	bwShareDesc = prometheus.NewDesc("levee_cluster_bandwidth_share_bytes_per_second",
		"This instance's share of the app's limits.bandwidth, set by demand each heartbeat.", []string{"app"}, nil)
	bwDemandDesc = prometheus.NewDesc("levee_cluster_bandwidth_demand_bytes_per_second",
		"The bandwidth demand this instance last published for the app: bytes passed plus the limit per waiting connection.", []string{"app"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Cluster) Describe(ch chan<- *prometheus.Desc) {
	ch <- degradedDesc
	ch <- liveDesc
	ch <- callsDesc
	ch <- failuresDesc
	ch <- bwShareDesc
	ch <- bwDemandDesc
}

// Collect implements prometheus.Collector.
func (c *Cluster) Collect(ch chan<- prometheus.Metric) {
	d := 0.0
	if c.Degraded() {
		d = 1
	}
	ch <- prometheus.MustNewConstMetric(degradedDesc, prometheus.GaugeValue, d)
	ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(c.Live()))
	ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(c.RoundTrips()))
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(c.Failures()))
	c.mu.Lock()
	bws := map[string]*Bandwidth{} // by app: the latest, should an app's old one linger
	for _, b := range c.bws {
		bws[b.app] = b
	}
	c.mu.Unlock()
	for app, b := range bws {
		ch <- prometheus.MustNewConstMetric(bwShareDesc, prometheus.GaugeValue, float64(b.Share()), app)
		ch <- prometheus.MustNewConstMetric(bwDemandDesc, prometheus.GaugeValue, float64(b.Want()), app)
	}
}
