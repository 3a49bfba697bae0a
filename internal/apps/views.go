// Package apps owns levee's app state that outlives reloads. This file
// holds its typed views, as the admin API (internal/admin) serves them and
// `levee top` reads them (docs/admin.md).
package apps

import (
	"time"

	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/topk"
)

// AppSummary is one app as GET /api/apps lists it.
type AppSummary struct {
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`
	Stored bool     `json:"stored"` // from the catalog, not the config file
	// InFlight and Queued are requests at the backends and waiting for a
	// slot; ConcurrencyLimit is the limit in force now.
	InFlight         int `json:"inflight"`
	Queued           int `json:"queued"`
	ConcurrencyLimit int `json:"concurrency_limit"`
	// RateLimit is limits.rate in force, in requests per second (0: off).
	RateLimit float64 `json:"rate_limit"`
	observe.LiveRates
	BackendsHealthy int     `json:"backends_healthy"`
	BackendsTotal   int     `json:"backends_total"`
	Imbalance       float64 `json:"imbalance"`
	ImbalanceAlert  bool    `json:"imbalance_alert"`
}

// AppDetail is GET /api/apps/{app}: the summary, the limits as configured
// beside those in force and why they differ, the backends, the heaviest
// clients by requests over 10 s.
type AppDetail struct {
	AppSummary
	Configured LimitView              `json:"configured"`
	InForce    LimitView              `json:"in_force"`
	Why        []string               `json:"why"`
	Backends   []observe.BackendStats `json:"backends"`
	// BackendLimits is backend_limits' state (nil when off).
	BackendLimits *observe.PoolStats `json:"backend_limits,omitempty"`
	// TopClients are the heaviest clients by requests over 10 s (none when
	// limits.client.top_k is 0).
	TopClients []topk.Share `json:"top_clients"`
	// TopK is limits.client.top_k: how many clients the summaries keep.
	TopK int `json:"top_k"`
}

// LimitView is an app's limits in the API's units.
type LimitView struct {
	Concurrency int           `json:"concurrency"`
	QueueMaxLen int           `json:"queue_max_len"`
	QueueWait   time.Duration `json:"queue_max_wait_ns"`
	Rate        float64       `json:"rate"`        // requests per second; 0: off
	ClientRate  float64       `json:"client_rate"` // per client; 0: off
}

// Instance is this levee as GET /api/instance shows it (the process
// fills in what the server does not know: version, config file).
type Instance struct {
	Role string `json:"role"` // active, or unexpected (another levee holds the lock)
	// StrictFactor scales limits while unexpected; OverloadFactor is the
	// overload monitor's, with its last reading.
	StrictFactor   float64                  `json:"strict_factor"`
	OverloadFactor float64                  `json:"overload_factor"`
	Signals        *observe.OverloadReading `json:"overload_signals,omitempty"`
	Cluster        *ClusterState            `json:"cluster,omitempty"` // nil: no cluster
	Apps           int                      `json:"apps"`
	ConfigChecksum string                   `json:"config_checksum,omitempty"`
	ConfigLoaded   time.Time                `json:"config_loaded"`
}

// ClusterState is the cluster's view of Redis.
type ClusterState struct {
	Redis         []string `json:"redis"`
	Reachable     bool     `json:"reachable"`
	Degraded      bool     `json:"degraded"` // limits split locally while Redis is unreachable
	LiveInstances int      `json:"live_instances"`
}
