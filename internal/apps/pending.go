package apps

import (
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// The state handed over for an app this table had not composed at the
// handover (a catalog app not loaded yet, or one a reload in progress had
// yet to compose) is kept aside by name and taken over when the app is
// composed, so that loading it later hands out no fresh burst. It is
// bounded as the parked apps are: at most catalog.cache.max_apps apps,
// each until its buckets would have refilled anyway (ParkMin at least).
// What is dropped unused is counted (levee_upgrade_state_dropped_total).

// pendingApp is one app's state handed over and not taken over yet, with
// what the old levee reported admitting for it since.
type pendingApp struct {
	state   appState
	version int
	at      time.Time // ImportState's now
	charges appCharges
	bytes   int64 // limits.bandwidth's
	backend int64 // backend_limits.rate's
}

// maxPendingKeys bounds the keys one pending app's reported charges keep;
// charges of further keys are not kept.
const maxPendingKeys = 1 << 14

// pend keeps as aside for app name, of state version v, handed over at
// now. Callers hold t.mu.
func (t *Table) pend(name string, as appState, v int, now time.Time) {
	limit := config.DefaultCatalogMaxApps
	if t.cfg != nil {
		limit = t.cfg.Catalog.Cache.MaxApps
	}
	p := &pendingApp{state: as, version: v, at: now}
	t.pending.Park(name, p, now.Add(max(ParkMin, as.ahead())), limit, t.dropPending)
}

// dropPending counts a pending app's state dropped unused.
func (t *Table) dropPending(*pendingApp) { t.pendingDropped.Add(1) }

// PendingDropped is how many apps' handed-over state was dropped before
// the app was composed.
func (t *Table) PendingDropped() uint64 { return t.pendingDropped.Load() }

// ahead is the longest any of as's buckets ran past its export: all are
// full again that long after it.
func (as *appState) ahead() time.Duration {
	var d time.Duration
	for _, rs := range []*rateState{as.Rate, as.Clients} {
		if rs == nil {
			continue
		}
		d = max(d, rs.Overflow)
		for _, e := range rs.Keys {
			d = max(d, e.Ahead)
		}
	}
	for _, p := range []*time.Duration{as.Bandwidth, as.Backend} {
		if p != nil {
			d = max(d, *p)
		}
	}
	return d
}

// merge adds o's admissions to c's.
func (c *appCharges) merge(o appCharges) {
	c.Rate, c.Clients = mergeKeys(c.Rate, o.Rate), mergeKeys(c.Clients, o.Clients)
}

func mergeKeys(dst, src map[string]int) map[string]int {
	if dst == nil {
		return src
	}
	for k, n := range src {
		if _, ok := dst[k]; ok || len(dst) < maxPendingKeys {
			dst[k] += n
		}
	}
	return dst
}

// takeOverLocked gives app a, just composed at now, what was handed over
// for it while no app of its name was composed: its pending state and the
// admissions reported since; or, for a fresh app after a state that could
// not be read, buckets empty as of then. Callers hold t.mu.
func (t *Table) takeOverLocked(a *App, fresh bool, now time.Time) {
	if p, ok := t.pending.Take(a.Name, now, t.dropPending); ok {
		a.takeOver(&p.state, p.version, p.at, now)
		a.charge(p.charges, now)
		a.bandwidth().Charge(now, p.bytes)
		a.backendGuard().ChargeRate(now, int(min(p.backend, maxCharge)))
		return
	}
	if fresh && !t.emptyAt.IsZero() && now.Before(t.emptyAt.Add(a.settle)) {
		a.startEmpty(t.emptyAt, now)
	}
}
