package apps

import (
	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/topk"
)

// Local returns the app's and its clients' rate stores when they are this
// process's own (nil when off, or shared through the cluster's Redis,
// which outlives any one process), for an upgrade to hand over.
func (r *Rates) Local() (app, client *ratelimit.LocalStore) {
	if r.shared != nil {
		return nil, nil
	}
	app, _ = r.app.(*ratelimit.LocalStore)
	client, _ = r.client.(*ratelimit.LocalStore)
	return app, client
}

// Handover is what an upgrade's state handover (the server's ExportState,
// ImportState and reports) reads and charges of one app: its components,
// each nil while its setting is off. Each is safe for concurrent use.
type Handover struct {
	Config                *config.App           // as last composed
	AppRates, ClientRates *ratelimit.LocalStore // nil: off, or shared through the cluster
	Bandwidth             *bandwidth.Limiter
	Adaptive              *limits.Adaptive // nil: a static concurrency limit
	Top                   *topk.ClientTop
	Limiter               *admit.Limiter
	Guard                 *protect.Guard
}

// Handovers returns every app's Handover, by name, as the table holds
// them now.
func (t *Table) Handovers() map[string]Handover {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Handover, len(t.apps))
	for name, a := range t.apps {
		h := Handover{Config: a.cfg, Adaptive: a.adaptive, Top: a.top.v, Limiter: a.limiter, Guard: a.guard.v}
		h.AppRates, h.ClientRates = a.rates.Local()
		if a.bw.v != nil {
			h.Bandwidth = a.bw.v.Limiter()
		}
		out[name] = h
	}
	return out
}
