package apps

import (
	"context"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/protect"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/topk"
)

const handoverConfig = `apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:1]
    limits: {rate: 10/s, burst: 5, concurrency: 3, client: {rate: 10/s, burst: 5, top_k: 4}}
    backend_limits: {inflight: 2}
`

// loaded is a new table with the apps of y loaded.
func loaded(t *testing.T, clk clock.Clock, y string) *Table {
	t.Helper()
	tab, _ := newTestTable(clk)
	load(tab, parse(t, y))
	return tab
}

// remaining is how many requests the app's bucket (or client's) admits now.
func remaining(t *testing.T, s *Table, client string, now time.Time) (app, cl int) {
	t.Helper()
	h := s.handover("a")
	a, c := h.AppRates, h.ClientRates
	ac := s.cfg.Apps["a"]
	app = a.AllowAt(limits.AppKey, limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst), now, 0).Remaining
	cl = c.AllowAt(client, limitsconf.GCRA(ac.Limits.Client.Rate, ac.Limits.Client.Burst), now, 0).Remaining
	return app, cl
}

// A state handed over carries each bucket, and the requests in flight
// hold concurrency slots until a report gives them back.
func TestStateHandover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig)
	h := old.handover("a")
	a, c := h.AppRates, h.ClientRates
	ac := old.cfg.Apps["a"]
	for range 4 {
		a.AllowAt(limits.AppKey, limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst), clk.Now(), 1)
	}
	c.AllowAt("client-1", limitsconf.GCRA(ac.Limits.Client.Rate, ac.Limits.Client.Burst), clk.Now(), 1)
	old.handover("a").Limiter.Hold(2) // two requests in flight,
	old.handover("a").Guard.Hold(1)   // one of them at the backends
	old.handover("a").Top.Observe("client-1", false, 100, 0, clk.Now())

	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	if app, cl := remaining(t, next, "client-1", clk.Now()); app != 1 || cl != 4 {
		t.Errorf("after the handover the app's bucket has %d, client-1's %d; want 1 and 4", app, cl)
	}
	// Until the old one's first report, every slot: it serves on meanwhile.
	if got := next.handover("a").Limiter.InFlight(); got != 3 {
		t.Errorf("new levee holds %d slots for the old one before its first report, want all 3", got)
	}
	if got := next.handover("a").Guard.InFlight(); got != 2 {
		t.Errorf("new levee holds %d backend slots for the old one before its first report, want both", got)
	}
	if top := next.handover("a").Top.Top(clk.Now()); len(top.Requests) != 1 || top.Requests[0].Key != "client-1" {
		t.Errorf("new levee's top clients: %+v, want client-1 carried over", top)
	}
	// The old one admits one more, and one of its two finishes.
	rep := old.Report()
	a.AllowAt(limits.AppKey, limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst), clk.Now(), 1)
	old.handover("a").Limiter.Release()
	if err := next.ApplyReport(rep.Take()); err != nil {
		t.Fatal(err)
	}
	rep.Stop()
	if app, _ := remaining(t, next, "client-1", clk.Now()); app != 0 {
		t.Errorf("after the report the app's bucket has %d, want 0 (the old one's admission charged)", app)
	}
	// The report's ceilings: what the old one has in flight, and a slack
	// (admit.Limiter.Seal), within each limit.
	if got := next.handover("a").Limiter.InFlight(); got != 2 {
		t.Errorf("new levee holds %d slots after the report, want 2: the old one's 1 and 1 of slack", got)
	}
	if got := next.handover("a").Guard.InFlight(); got != 2 {
		t.Errorf("new levee holds %d backend slots after the report, want 2: the old one's 1 and 1 of slack", got)
	}
	next.ReleaseHeld()
	if got := next.handover("a").Limiter.InFlight() + next.handover("a").Guard.InFlight(); got != 0 {
		t.Errorf("new levee holds %d slots after the old one exited, want 0", got)
	}
}

// A state the new levee cannot read (another version, or garbage) starts
// every bucket empty, not full.
func TestUnreadableStateStartsEmpty(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old := loaded(t, clk, handoverConfig)
	other := encode(handoverState{Version: StateVersion + 1})
	for name, state := range map[string][]byte{"another version": other, "garbage": []byte("not gob"), "the same": old.ExportState()} {
		next := loaded(t, clk, handoverConfig)
		err := next.ImportState(state)
		app, cl := remaining(t, next, "anyone", clk.Now())
		if name == "the same" {
			if err != nil || app != 5 || cl != 5 {
				t.Errorf("%s: %v, buckets %d and %d; want full ones", name, err, app, cl)
			}
			continue
		}
		if err == nil || app != 0 || cl != 0 {
			t.Errorf("%s: ImportState = %v, buckets %d and %d; want an error and empty buckets", name, err, app, cl)
		}
		clk.Advance(100 * time.Millisecond)
		if app, _ := remaining(t, next, "anyone", clk.Now()); app != 1 {
			t.Errorf("%s: one interval later the bucket has %d, want 1: it refills at its rate", name, app)
		}
	}
}

const handoverBandwidthConfig = `apps:
  b:
    hosts: [b.test]
    backends: [127.0.0.1:1]
    limits: {bandwidth: 1MB/s, concurrency: {adaptive: gradient, min: 2, max: 100}}
`

// The bandwidth bucket and what the adaptive limit learnt are handed
// over; the bytes the old levee still sends are charged; an unreadable
// state starts the bandwidth bucket empty.
func TestBandwidthAndAdaptiveHandover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverBandwidthConfig), loaded(t, clk, handoverBandwidthConfig)
	ob := old.handover("b")
	ob.Adaptive.Resume(37, 5*time.Millisecond) // as if learnt
	for range 4 {
		if _, err := ob.Bandwidth.ReserveAt(clk.Now(), ob.Bandwidth.Chunk()); err != nil {
			t.Fatal(err)
		}
	}
	ahead := ob.Bandwidth.Ahead(clk.Now())
	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	nb := next.handover("b")
	if n, base, ok := nb.Adaptive.Learnt(); !ok || n != 37 || base != 5*time.Millisecond {
		t.Errorf("adaptive limit after the handover: %d %v %v, want 37 5ms", n, base, ok)
	}
	if got := nb.Limiter.Limits().Concurrency; got != 37 {
		t.Errorf("concurrency in force %d, want the learnt 37", got)
	}
	if got := nb.Bandwidth.Ahead(clk.Now()); got != ahead || ahead <= 0 {
		t.Errorf("bandwidth bucket ahead by %v after the handover, want the old one's %v", got, ahead)
	}
	rep := old.Report()
	if _, err := ob.Bandwidth.ReserveAt(clk.Now(), ob.Bandwidth.Chunk()); err != nil {
		t.Fatal(err)
	}
	if err := next.ApplyReport(rep.Take()); err != nil {
		t.Fatal(err)
	}
	rep.Stop()
	if got, want := nb.Bandwidth.Ahead(clk.Now()), ob.Bandwidth.Ahead(clk.Now()); got != want {
		t.Errorf("bandwidth bucket ahead by %v after the report, want the old one's %v", got, want)
	}

	empty := loaded(t, clk, handoverBandwidthConfig)
	if err := empty.ImportState([]byte("not gob")); err == nil {
		t.Fatal("an unreadable state was taken")
	}
	if got := empty.handover("b").Bandwidth.Ahead(clk.Now()); got <= 0 {
		t.Errorf("bandwidth bucket ahead by %v after an unreadable state, want its whole burst spent", got)
	}
}

// parts are one app's components that the handover reads and charges.
type parts struct {
	AppRates, ClientRates *ratelimit.LocalStore
	Bandwidth             *bandwidth.Limiter
	Adaptive              *limits.Adaptive
	Top                   *topk.ClientTop
	Limiter               *admit.Limiter
	Guard                 *protect.Guard
}

// handover is app name's parts.
func (t *Table) handover(name string) parts {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.apps[name]
	p := parts{Bandwidth: a.bandwidth(), Adaptive: a.adaptive, Top: a.top.v, Limiter: a.limiter, Guard: a.backendGuard()}
	p.AppRates, p.ClientRates = a.rates.Local()
	return p
}

const handoverBackendConfig = `apps:
  p:
    hosts: [p.test]
    backends: [127.0.0.1:1]
    limits: {rate: 10/s, burst: 5}
    backend_limits: {rate: 10/s, burst: 4}
`

// backendLeft is how many requests backend_limits.rate's bucket of app p
// admits at now before it is empty (each taken and given back).
func backendLeft(t *testing.T, tab *Table, now time.Time) int {
	t.Helper()
	g := tab.handover("p").Guard
	return 4 - int((g.RateAhead(now)+99*time.Millisecond)/(100*time.Millisecond))
}

// backend_limits.rate's bucket is taken over, not duplicated: the new
// levee continues the old one's, is charged what the old one admits after
// the export, and starts it empty when the state is unreadable or of
// version 1, which lacks it.
func TestBackendRateHandover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverBackendConfig), loaded(t, clk, handoverBackendConfig)
	og := old.handover("p").Guard
	for range 3 {
		s, err := og.Enter(t.Context(), "c", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		s.Release()
	}
	rep := old.Report()
	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	if got := backendLeft(t, next, clk.Now()); got != 1 {
		t.Errorf("after the handover the pool's bucket has %d, want the old one's 1", got)
	}
	if _, err := og.Enter(t.Context(), "c", clk.Now()); err != nil { // the old one admits its last
		t.Fatal(err)
	}
	if err := next.ApplyReport(rep.Take()); err != nil {
		t.Fatal(err)
	}
	rep.Stop()
	if got := backendLeft(t, next, clk.Now()); got != 0 {
		t.Errorf("after the report the pool's bucket has %d, want 0: the old one's admission charged", got)
	}

	v1 := encode(handoverState{Version: 1, Apps: map[string]appState{"p": {}}})
	for name, state := range map[string][]byte{"version 1": v1, "garbage": []byte("not gob")} {
		tab := loaded(t, clk, handoverBackendConfig)
		err := tab.ImportState(state)
		if (err != nil) != (name == "garbage") {
			t.Errorf("%s: ImportState = %v", name, err)
		}
		if got := backendLeft(t, tab, clk.Now()); got != 0 {
			t.Errorf("%s: the pool's bucket has %d, want it empty, not full", name, got)
		}
	}
}

// Three generations alive: the second hands over while the first still
// drains. What the first still has in flight, and what it admits and
// reports afterwards, reach the third through the second: the levee that
// holds the budget now counts them until the first has exited.
func TestThreeGenerationsPassOnTheOldestsReports(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	first, second, third := loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig)
	ac := first.cfg.Apps["a"]
	lim := limitsconf.GCRA(ac.Limits.Rate, ac.Limits.Burst)
	inFlight := func(tab *Table) (int, int) {
		h := tab.handover("a")
		return h.Limiter.InFlight(), h.Guard.InFlight()
	}
	// The first has two requests in flight, one of them at the backends,
	// and hands over to the second.
	first.handover("a").Limiter.Hold(2)
	first.handover("a").Guard.Hold(1)
	rep1 := first.Report()
	if err := second.ImportState(first.ExportState()); err != nil {
		t.Fatal(err)
	}
	// The second admits one of its own, then hands over to the third.
	second.handover("a").Limiter.Hold(1)
	rep2 := second.Report()
	if err := third.ImportState(second.ExportState()); err != nil {
		t.Fatal(err)
	}
	// Before any report, each holds every slot for the one before it: the
	// second its 3 (2) for the first, the third those and the second's own.
	if app, be := inFlight(third); app != 4 || be != 2 {
		t.Fatalf("the third holds %d slots (%d at the backends) after its handover; want 4 (2): the second's 3 (2) held for the first and its own one", app, be)
	}
	if err := second.ApplyReport(rep1.Take()); err != nil {
		t.Fatal(err)
	}
	if err := third.ApplyReport(rep2.Take()); err != nil {
		t.Fatal(err)
	}
	// The reports' ceilings (admit.Limiter.Seal): the first's 2 (1) in
	// flight and 1 of slack, within the limits, 3 (2); the second's 4 (2)
	// with them.
	if app, be := inFlight(third); app != 4 || be != 2 {
		t.Fatalf("the third holds %d slots (%d at the backends) after the first reports; want 4 (2)", app, be)
	}
	// The first admits one more on a connection it holds, and reports.
	first.handover("a").AppRates.AllowAt(limits.AppKey, lim, clk.Now(), 1)
	if err := second.ApplyReport(rep1.Take()); err != nil {
		t.Fatal(err)
	}
	before, _ := remaining(t, third, "client-1", clk.Now())
	if err := third.ApplyReport(rep2.Take()); err != nil {
		t.Fatal(err)
	}
	if after, _ := remaining(t, third, "client-1", clk.Now()); after != before-1 {
		t.Errorf("the third's app bucket went from %d to %d on the second's report; want one less: the first's admission passed on", before, after)
	}
	// Two of the first's finish, one at the backends; then the first exits.
	first.handover("a").Limiter.Release()
	first.handover("a").Limiter.Release()
	first.handover("a").Guard.Unhold(1)
	if err := second.ApplyReport(rep1.Take()); err != nil {
		t.Fatal(err)
	}
	if err := third.ApplyReport(rep2.Take()); err != nil {
		t.Fatal(err)
	}
	// The first's ceilings fall to its slack, 1 (1); the second's to its
	// 2 (1) in flight and a slack: 3 (2).
	if app, be := inFlight(third); app != 3 || be != 2 {
		t.Errorf("the third holds %d slots (%d at the backends) once the first's requests ended; want 3 (2)", app, be)
	}
	rep1.Stop()
	second.ReleaseHeld()
	second.handover("a").Limiter.Release()
	if err := third.ApplyReport(rep2.Take()); err != nil {
		t.Fatal(err)
	}
	if app, be := inFlight(third); app != 1 || be != 1 {
		t.Errorf("the third holds %d slots (%d at the backends) once both drained; want the second's slack, 1 (1)", app, be)
	}
	rep2.Stop()
	third.ReleaseHeld() // the second exited
	if app, be := inFlight(third); app != 0 || be != 0 {
		t.Errorf("the third holds %d slots (%d at the backends) once the second exited; want 0", app, be)
	}
}

// Across a handover the two levees never exceed a concurrency together:
// the new one holds every slot until the old one's first report, and from
// that report on the old one admits, on the connections it still holds,
// only below the ceiling it reported (what it had in flight and, for a
// second, a slack; the rest get admit.ErrSealed), so what the new one
// holds for it never falls below what it has in flight, whatever arrives
// at either between reports. Stop lifts the seal.
func TestHandedOverLeveeAdmitsOnlyWithinWhatItReported(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig)
	// A context whose deadline is the fake clock's now: a request that
	// finds no free slot is told so at once (DeadlineExceeded), not queued.
	now, cancel := context.WithDeadline(t.Context(), clk.Now())
	defer cancel()
	free := func(l *admit.Limiter) bool {
		t.Helper()
		switch err := l.Acquire(now); err {
		case nil:
			return true
		case context.DeadlineExceeded, admit.ErrSealed:
			return false
		default:
			t.Fatalf("Acquire = %v", err)
			return false
		}
	}
	var rep *Reporter
	report := func() {
		t.Helper()
		if err := next.ApplyReport(rep.Take()); err != nil {
			t.Fatal(err)
		}
	}
	ol, og, nl := old.handover("a").Limiter, old.handover("a").Guard, next.handover("a").Limiter
	if !free(ol) { // the old one has 1 of its 3 slots in flight,
		t.Fatal("no slot before the handover")
	}
	s, err := og.Enter(now, "c", clk.Now()) // at the backends, of 2
	if err != nil {
		t.Fatal(err)
	}
	rep = old.Report()
	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	// Until the old one's first report, the new one holds every slot for
	// it, and the old one admits as before.
	if free(nl) {
		t.Fatal("the new levee admitted before the old one's first report")
	}
	if !free(ol) {
		t.Fatal("the old levee did not admit before its first report")
	}
	ol.Release()
	// The first report seals the old one's limits at 1 in flight and 1 of
	// slack: 2 of 3, and 2 of 2 at the backends.
	report()
	if !free(nl) || free(nl) {
		t.Fatal("the new levee did not admit exactly the 1 slot the old one's ceiling leaves")
	}
	if !free(ol) {
		t.Fatal("the old levee did not admit within its slack")
	}
	if err := ol.Acquire(now); err != admit.ErrSealed {
		t.Fatalf("the old levee's third request: Acquire = %v, want ErrSealed: 3 and the new one's 1 are past a concurrency of 3", err)
	}
	s2, err := og.Enter(now, "c", clk.Now())
	if err != nil {
		t.Fatalf("the old levee's backend slot within its slack: Enter = %v", err)
	}
	if _, err := og.Enter(now, "c", clk.Now()); err != admit.ErrSealed {
		t.Fatalf("the old levee's backend slot past its ceiling: Enter = %v, want ErrSealed", err)
	}
	ol.Release() // one ends; another arrives on a held connection
	if !free(ol) {
		t.Fatal("the old levee did not admit into the slot it freed")
	}
	report() // 2 in flight: the ceiling stays 2, never 3
	if free(nl) {
		t.Fatal("the new levee admitted past the 2 slots still held for the old one")
	}
	// Both of the old one's end, and it reports: its ceiling falls to the
	// slack, and the new one has the rest.
	ol.Release()
	ol.Release()
	s.Release()
	s2.Release()
	report()
	if !free(nl) || free(nl) {
		t.Fatal("the new levee does not have the 2 of 3 slots the old one's slack leaves")
	}
	if !free(ol) || free(ol) {
		t.Fatal("the old levee does not have exactly its slack")
	}
	ol.Release()
	// A second after the first report, the slack goes: the old one's
	// ceiling falls to what it has in flight, none, and the new one has
	// every slot.
	clk.Advance(sealGrace)
	report()
	if !free(nl) || free(nl) {
		t.Fatal("the new levee does not have all 3 slots once the old one's slack went")
	}
	if free(ol) {
		t.Fatal("the old levee admitted past a ceiling of 0")
	}
	// Had the upgrade failed here, the old one's limits are its own again.
	rep.Stop()
	for range 3 {
		if !free(ol) {
			t.Fatal("Stop did not lift the seal")
		}
	}
	for range 2 {
		if _, err := og.Enter(now, "c", clk.Now()); err != nil {
			t.Fatalf("Stop did not lift the backend slots' seal: Enter = %v", err)
		}
	}
}
