package apps

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/topk"
)

// An upgrade's handover of the limits' state (docs/deploy.md, "Upgrades"):
// the table owns that state, so it exports it (ExportState), takes it
// over (ImportState), and counts what the old levee admits and holds
// afterwards (report.go).

// StateVersion is the version of the limits' state an upgrade hands over
// (ExportState). A levee handed a state of another version cannot read it
// and starts its buckets empty, not full (ImportState); the adaptive
// limits then start from their configured start, as on a fresh start.
// Version 2 added backend_limits.rate's bucket: a version 1 state is read,
// and that bucket, which it lacks, starts empty.
const StateVersion = 2

// readable reports whether this levee reads a state or report of version v.
func readable(v int) bool { return v == 1 || v == StateVersion }

// handoverState is the limits' state of a whole levee, by app. Gob keeps
// client keys as the bytes they are.
type handoverState struct {
	Version int
	Apps    map[string]appState
	// InFlight are the requests each app had in flight at the export:
	// they hold slots of its concurrency in the new levee (report.go).
	InFlight map[string]slots
}

type appState struct {
	Rate, Clients *rateState // nil: the limit is off, or shared through the cluster
	// Bandwidth is how far ahead of now limits.bandwidth's bucket ran (nil: off).
	Bandwidth *time.Duration
	// Adaptive is what an adaptive concurrency limit learnt (nil: static).
	Adaptive *learnt
	// Top is the top clients' counts (nil: limits.client.top_k is 0).
	Top *topk.Snapshot
	// Backend is how far ahead of now backend_limits.rate's bucket ran
	// (nil: off).
	Backend *time.Duration
}

type learnt struct {
	Limit    int
	Baseline time.Duration
}

type rateState struct {
	Keys     []ratelimit.Entry
	Overflow time.Duration
}

// ExportState returns the limits' state of every app, for the levee that
// takes over from this one (ImportState). Call it after Report, so that
// what this one admits after the export is reported. It does not seal the
// limiters: this levee serves on until the new one does, and the new one
// holds every slot until the first report (ImportState).
func (t *Table) ExportState() []byte {
	now := t.o.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := handoverState{Version: StateVersion, Apps: make(map[string]appState, len(t.apps)), InFlight: t.inFlightLocked(false, false)}
	for name, a := range t.apps {
		st.Apps[name] = a.export(now)
	}
	return encode(st)
}

// export is a's limits' state at now.
func (a *App) export(now time.Time) appState {
	var as appState
	app, client := a.rates.Local()
	as.Rate, as.Clients = exportRate(app, now), exportRate(client, now)
	if bw := a.bandwidth(); bw != nil {
		as.Bandwidth = new(bw.Ahead(now))
	}
	if a.adaptive != nil {
		if n, base, ok := a.adaptive.Learnt(); ok {
			as.Adaptive = &learnt{Limit: n, Baseline: base}
		}
	}
	as.Top = a.top.v.Snapshot(now)
	if g := a.backendGuard(); g.Stats().Rate > 0 {
		as.Backend = new(g.RateAhead(now))
	}
	return as
}

func exportRate(st *ratelimit.LocalStore, now time.Time) *rateState {
	if st == nil {
		return nil
	}
	keys, overflow := st.Export(now)
	return &rateState{Keys: keys, Overflow: overflow}
}

// ImportState takes over the limits' state an upgraded levee exported:
// rate and bandwidth buckets, what adaptive limits learnt, the top
// clients' counts, the requests in flight. The state of an app not
// composed yet is kept aside until it is (pending.go). Call it before
// serving. A state it cannot read (another version, or corrupt) is not
// guessed at: every app's and client's rate bucket, every bandwidth
// bucket and every backend_limits.rate bucket starts empty, refilling at
// its rate (an app composed later too, as of now), and the error says so;
// the caller serves all the same.
func (t *Table) ImportState(b []byte) error {
	var st handoverState
	err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st)
	if err == nil && !readable(st.Version) {
		err = fmt.Errorf("version %d, this levee reads 1 to %d", st.Version, StateVersion)
	}
	now := t.o.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.emptyAt = now
		for _, a := range t.apps {
			a.startEmpty(now, now)
		}
		return fmt.Errorf("apps: the handed-over state is unreadable (%w): every rate bucket starts empty", err)
	}
	for name, as := range st.Apps {
		if a := t.apps[name]; a != nil {
			a.takeOver(&as, st.Version, now, now)
		} else {
			t.pend(name, as, st.Version, now)
		}
	}
	t.holdLocked(wholeLimits(t.apps, st.InFlight))
	return nil
}

// wholeLimits is, for each app, its whole concurrency and its whole
// backend_limits.inflight, or more if that many are in flight: what a
// new levee holds for the old one until its first report. The old levee
// serves on until this one does, admitting what it will, and seals its
// limits at the ceilings of that first report, sent as soon as this one
// serves (admit.Limiter.Seal): until then no count it sent bounds what it
// has in flight. The new levee thus admits nothing of its own until that
// report, a moment after it began to serve.
func wholeLimits(apps map[string]*App, inflight map[string]slots) map[string]slots {
	out := make(map[string]slots, len(apps))
	for name, a := range apps {
		n := inflight[name]
		out[name] = slots{App: max(n.App, a.limiter.Limits().Concurrency), Backend: max(n.Backend, a.backendGuard().Stats().InflightLimit)}
	}
	return out
}

// takeOver continues a's limits at now from as, of state version v,
// exported by the levee that handed over at what was at here (at ≤ now:
// the time between has refilled the buckets).
func (a *App) takeOver(as *appState, v int, at, now time.Time) {
	since := now.Sub(at)
	app, client := a.rates.Local()
	importRate(app, as.Rate, since, now)
	importRate(client, as.Clients, since, now)
	if bw := a.bandwidth(); bw != nil && as.Bandwidth != nil {
		bw.Resume(now, *as.Bandwidth-since)
	}
	if a.adaptive != nil && as.Adaptive != nil {
		a.adaptive.Resume(as.Adaptive.Limit, as.Adaptive.Baseline)
	}
	a.top.v.Restore(at, as.Top)
	switch {
	case v < 2: // a state without backend_limits.rate's bucket
		a.backendGuard().StartRateEmpty(at)
	case as.Backend != nil:
		a.backendGuard().ResumeRate(now, *as.Backend-since)
	}
}

// importRate takes over rs, exported since ago, into st at now.
func importRate(st *ratelimit.LocalStore, rs *rateState, since time.Duration, now time.Time) {
	if st == nil || rs == nil {
		return
	}
	for i := range rs.Keys {
		rs.Keys[i].Ahead -= since // Import skips a key full again
	}
	st.Import(now, rs.Keys, rs.Overflow-since)
}

// startEmpty makes a's and its clients' rate buckets, its bandwidth
// bucket and backend_limits.rate's, start empty as of at (≤ now): the
// whole burst spent then, refilling since. The bandwidth bucket, whose
// burst is short, starts empty at now: stricter by what it refilled.
func (a *App) startEmpty(at, now time.Time) {
	since := now.Sub(at)
	app, client := a.rates.Local()
	if app != nil {
		app.StartEmpty(now, depth(a.rate)-since)
	}
	if client != nil {
		client.StartEmpty(now, depth(a.clientRate)-since)
	}
	a.bandwidth().StartEmpty(now)
	a.backendGuard().StartRateEmpty(at)
}

// depth is how long an empty bucket of lim takes to fill.
func depth(lim ratelimit.Limit) time.Duration { return time.Duration(lim.Burst) * lim.Interval }

// bandwidth is a's bandwidth limiter, nil while limits.bandwidth is off.
func (a *App) bandwidth() *bandwidth.Limiter {
	if a.bw.v == nil {
		return nil
	}
	return a.bw.v.Limiter()
}

func encode(v any) []byte {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil { // plain types: a broken invariant
		panic(fmt.Sprintf("apps: encode %T: %v", v, err))
	}
	return buf.Bytes()
}
