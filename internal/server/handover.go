package server

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/topk"
)

// StateVersion is the version of the limits' state an upgrade hands over
// (ExportState). A levee handed a state of another version cannot read it
// and starts its buckets empty, not full (ImportState); the adaptive
// limits then start from their configured start, as on a fresh start.
const StateVersion = 1

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
// takes over from this one (ImportState). Call it once this one admits no
// more requests, so that nothing it admits is missing from the state.
func (s *Server) ExportState() []byte {
	now := s.clk.Now()
	st := handoverState{Version: StateVersion, Apps: map[string]appState{}, InFlight: s.inFlight()}
	for name, a := range s.apps.Handovers() {
		var as appState
		as.Rate, as.Clients = exportRate(a.AppRates, now), exportRate(a.ClientRates, now)
		if a.Bandwidth != nil {
			as.Bandwidth = new(a.Bandwidth.Ahead(now))
		}
		if a.Adaptive != nil {
			if n, base, ok := a.Adaptive.Learnt(); ok {
				as.Adaptive = &learnt{Limit: n, Baseline: base}
			}
		}
		as.Top = a.Top.Snapshot(now)
		st.Apps[name] = as
	}
	return encode(st)
}

func exportRate(st *ratelimit.LocalStore, now time.Time) *rateState {
	if st == nil {
		return nil
	}
	keys, overflow := st.Export(now)
	return &rateState{Keys: keys, Overflow: overflow}
}

// ImportState takes over the limits' state an upgraded levee exported,
// for the apps both have: rate and bandwidth buckets, what adaptive
// limits learnt, the top clients' counts, the requests in flight. Call it before serving. A state
// it cannot read (another version, or corrupt) is not guessed at: every
// app's and client's rate bucket, and every bandwidth bucket, starts
// empty, refilling at its rate, and the error says so; the caller serves
// all the same.
func (s *Server) ImportState(b []byte) error {
	var st handoverState
	err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st)
	if err == nil && st.Version != StateVersion {
		err = fmt.Errorf("version %d, this levee reads %d", st.Version, StateVersion)
	}
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.startEmpty(now)
		return fmt.Errorf("server: the handed-over state is unreadable (%w): every rate bucket starts empty", err)
	}
	all := s.apps.Handovers()
	for name, as := range st.Apps {
		a, ok := all[name]
		if !ok {
			continue
		}
		importRate(a.AppRates, as.Rate, now)
		importRate(a.ClientRates, as.Clients, now)
		if a.Bandwidth != nil && as.Bandwidth != nil {
			a.Bandwidth.Resume(now, *as.Bandwidth)
		}
		if a.Adaptive != nil && as.Adaptive != nil {
			a.Adaptive.Resume(as.Adaptive.Limit, as.Adaptive.Baseline)
		}
		a.Top.Restore(now, as.Top)
	}
	s.holdLocked(st.InFlight)
	return nil
}

func importRate(st *ratelimit.LocalStore, rs *rateState, now time.Time) {
	if st != nil && rs != nil {
		st.Import(now, rs.Keys, rs.Overflow)
	}
}

// startEmpty makes every app's and client's rate bucket start empty at
// now: the whole burst spent. Callers hold s.mu.
func (s *Server) startEmpty(now time.Time) {
	for _, a := range s.apps.Handovers() {
		ac := a.Config
		if ac == nil {
			continue
		}
		if a.AppRates != nil {
			a.AppRates.StartEmpty(now, depth(limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst)))
		}
		if a.ClientRates != nil {
			a.ClientRates.StartEmpty(now, depth(limitsconf.GCRA(ac.Limits.Client.Rate, ac.Limits.Client.Burst)))
		}
		a.Bandwidth.StartEmpty(now)
	}
}

// depth is how long an empty bucket of lim takes to fill.
func depth(lim ratelimit.Limit) time.Duration { return time.Duration(lim.Burst) * lim.Interval }
