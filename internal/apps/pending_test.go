package apps

import (
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
)

const storedApp = "apps:\n  s: {hosts: [s.test], backends: [127.0.0.1:1], limits: {rate: 10/s, burst: 5}}\n"

// composeStored composes the catalog app s on tab, as a cold load does.
func composeStored(t *testing.T, tab *Table) {
	t.Helper()
	_, old := tab.Compose("s", parse(t, storedApp).Apps["s"], forward.Trust{}, true)
	tab.ReleaseConns(old)
}

// spendS takes n from app s's bucket at now; it reports how many of a
// further query it would still admit.
func spendS(t *testing.T, tab *Table, n int, now time.Time) int {
	t.Helper()
	st := tab.handover("s").AppRates
	lim := limitsconf.GCRA(parse(t, storedApp).Apps["s"].Limits.Rate, 5)
	for range n {
		if !st.AllowAt(limits.AppKey, lim, now, 1).Allowed {
			t.Fatal("refused within the burst")
		}
	}
	return st.AllowAt(limits.AppKey, lim, now, 0).Remaining
}

// A catalog app the new levee has not loaded at the handover keeps its
// state aside, with what the old levee reports admitting for it since,
// and takes it over when it is loaded; the time between refills it.
func TestPendingStateTakenOverWhenComposed(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig)
	composeStored(t, old)
	spendS(t, old, 3, clk.Now())
	rep := old.Report()
	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	spendS(t, old, 1, clk.Now()) // admitted by the old one after the export
	if err := next.ApplyReport(rep.Take()); err != nil {
		t.Fatal(err)
	}
	rep.Stop()
	clk.Advance(100 * time.Millisecond) // one token refilled
	composeStored(t, next)
	if left := spendS(t, next, 0, clk.Now()); left != 2 {
		t.Errorf("app s loaded after the handover has %d in its bucket, want 2 (5 - 3 - 1 + 1 refilled): its state was lost", left)
	}
	if n := next.PendingDropped(); n != 0 {
		t.Errorf("%d pending states dropped, want 0", n)
	}
}

// A pending state is bounded in time: once its buckets would have
// refilled, a sweep drops it and counts it, and the app loads fresh.
func TestPendingStateDroppedOnceSettled(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	old, next := loaded(t, clk, handoverConfig), loaded(t, clk, handoverConfig)
	composeStored(t, old)
	spendS(t, old, 5, clk.Now())
	if err := next.ImportState(old.ExportState()); err != nil {
		t.Fatal(err)
	}
	next.Sweep()
	if n := next.PendingDropped(); n != 0 {
		t.Fatalf("a sweep before it settled dropped %d pending states", n)
	}
	clk.Advance(ParkMin + time.Second)
	next.Sweep()
	if n := next.PendingDropped(); n != 1 {
		t.Errorf("%d pending states dropped after they settled, want 1", n)
	}
	composeStored(t, next)
	if left := spendS(t, next, 0, clk.Now()); left != 5 {
		t.Errorf("app s loaded after its state settled has %d, want a full 5", left)
	}
}

// After a state that could not be read, an app composed later starts its
// buckets empty as of the handover, refilled by the time since; one
// composed after they would have refilled starts full.
func TestUnreadableStateEmptiesLaterApps(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	next := loaded(t, clk, handoverConfig)
	if err := next.ImportState([]byte("not gob")); err == nil {
		t.Fatal("an unreadable state was taken")
	}
	clk.Advance(200 * time.Millisecond)
	composeStored(t, next)
	if left := spendS(t, next, 0, clk.Now()); left != 2 {
		t.Errorf("app s loaded 200ms after an unreadable state has %d, want 2 (empty, refilled 2)", left)
	}
	later := loaded(t, clk, handoverConfig)
	if err := later.ImportState(nil); err == nil {
		t.Fatal("an empty state was taken")
	}
	clk.Advance(ParkMin + time.Second)
	composeStored(t, later)
	if left := spendS(t, later, 0, clk.Now()); left != 5 {
		t.Errorf("app s loaded long after an unreadable state has %d, want a full 5", left)
	}
}
