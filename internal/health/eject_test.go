package health

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
)

var t0 = time.Unix(1_700_000_000, 0)

func newSet(n int, prev *balance.Set) *balance.Set {
	specs := make([]balance.Spec, n)
	for i := range specs {
		specs[i] = balance.Spec{ID: fmt.Sprintf("10.0.0.%d:80", i+1)}
	}
	return balance.NewSet(specs, prev, t0)
}

func newEjector(t *testing.T, cfg Ejection) (*Ejector, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	e, err := NewEjector(cfg, EjectorOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return e, &logs
}

// fail reports k Failed outcomes for backend i at now.
func fail(e *Ejector, s *balance.Set, i, k int, now time.Time) {
	for range k {
		e.Observe(s, i, balance.Failed, now)
	}
}

func TestEjectionDefaultsAndValidate(t *testing.T) {
	if got, want := (Ejection{}).WithDefaults(), (Ejection{5, 30 * time.Second, 5 * time.Minute, 50}); got != want {
		t.Errorf("defaults %+v; want %+v", got, want)
	}
	bad := Ejection{ConsecutiveFailures: -1, BaseTime: -time.Second, MaxTime: time.Second, MaxEjectedPercent: 101}
	err := bad.WithDefaults().Validate()
	for _, field := range []string{"ejection.consecutive_failures", "ejection.base_time", "ejection.max_ejected_percent"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v; want it to name %s", err, field)
		}
	}
	if _, err := NewEjector(Ejection{BaseTime: time.Minute, MaxTime: time.Second}, EjectorOptions{}); err == nil ||
		!strings.Contains(err.Error(), "ejection.max_time") {
		t.Errorf("NewEjector(max < base) error %v; want ejection.max_time", err)
	}
}

func TestEjectAfterExactlyNFailuresAndExpiry(t *testing.T) {
	e, logs := newEjector(t, Ejection{})
	s := newSet(4, nil)
	b := s.Backend(0)
	fail(e, s, 0, 4, t0)
	if !b.Healthy(t0) {
		t.Fatal("ejected after 4 failures; want 5")
	}
	fail(e, s, 0, 1, t0)
	if b.Healthy(t0) {
		t.Fatal("not ejected after 5 failures")
	}
	if b.Healthy(t0.Add(30*time.Second - 1)) {
		t.Error("ejection ended before BaseTime")
	}
	if !b.Healthy(t0.Add(30 * time.Second)) {
		t.Error("ejection did not expire after BaseTime")
	}
	if n := strings.Count(logs.String(), "backend ejected"); n != 1 {
		t.Errorf("%d ejection records; want 1:\n%s", n, logs)
	}
	// Stragglers during the ejection do not count: after expiry it takes a
	// fresh run of 5.
	fail(e, s, 0, 10, t0.Add(time.Second))
	now := t0.Add(30 * time.Second)
	fail(e, s, 0, 4, now)
	if !b.Healthy(now) {
		t.Error("re-ejected after 4 failures following expiry")
	}
	fail(e, s, 0, 1, now)
	if b.Healthy(now) {
		t.Error("not re-ejected after a fresh run of 5")
	}
	if got := e.Ejections(); got["10.0.0.1:80"] != 2 || len(got) != 1 {
		t.Errorf("Ejections() = %v; want 10.0.0.1:80: 2", got)
	}
}

func TestOKResetsRunCanceledDoesNot(t *testing.T) {
	e, _ := newEjector(t, Ejection{})
	s := newSet(4, nil)
	fail(e, s, 1, 4, t0)
	e.Observe(s, 1, balance.OK, t0)
	fail(e, s, 1, 4, t0)
	if !s.Backend(1).Healthy(t0) {
		t.Fatal("ejected although an OK broke the run")
	}
	e.Observe(s, 1, balance.Canceled, t0)
	fail(e, s, 1, 1, t0)
	if s.Backend(1).Healthy(t0) {
		t.Fatal("a Canceled broke the run")
	}
}

func TestMaxEjectedPercent(t *testing.T) {
	for _, tc := range []struct {
		n, percent, want int
	}{
		{10, 50, 5},
		{3, 50, 1},   // round down
		{1, 50, 0},   // never the last one
		{2, 100, 1},  // at least one stays eligible
		{10, 100, 9}, // at least one stays eligible
		{10, 5, 0},   // ⌊0.5⌋
	} {
		t.Run(fmt.Sprintf("%d@%d%%", tc.n, tc.percent), func(t *testing.T) {
			e, logs := newEjector(t, Ejection{MaxEjectedPercent: tc.percent})
			s := newSet(tc.n, nil)
			for range 3 { // runs of 5, 10, 15: refused ones are retried
				for i := range tc.n {
					fail(e, s, i, 5, t0)
				}
			}
			ejected := 0
			for i := range tc.n {
				if !s.Backend(i).Healthy(t0) {
					ejected++
				}
			}
			if ejected != tc.want {
				t.Errorf("%d ejected; want %d", ejected, tc.want)
			}
			if refused := tc.n - tc.want; strings.Count(logs.String(), "ejection refused") != refused {
				t.Errorf("want one refusal record for each of %d backends:\n%s", refused, logs)
			}
		})
	}
}

func TestMaxEjectedPercentConcurrent(t *testing.T) {
	e, _ := newEjector(t, Ejection{})
	s := newSet(10, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 200 {
				e.Observe(s, (g+k)%10, balance.Failed, t0)
			}
		})
	}
	wg.Wait()
	ejected := 0
	for i := range 10 {
		if !s.Backend(i).Healthy(t0) {
			ejected++
		}
	}
	if ejected != 5 {
		t.Errorf("%d of 10 ejected; want exactly 5", ejected)
	}
}

func TestEjectionRefusedWhenNoOtherHealthy(t *testing.T) {
	e, _ := newEjector(t, Ejection{MaxEjectedPercent: 100})
	s := newSet(3, nil)
	s.Backend(1).SetHealthy(false) // active check says down
	fail(e, s, 0, 5, t0)
	if s.Backend(0).Healthy(t0) {
		t.Fatal("backend 0 not ejected although backend 2 is healthy")
	}
	fail(e, s, 2, 5, t0)
	if !s.Backend(2).Healthy(t0) {
		t.Error("ejected the last healthy backend")
	}
}

func TestBackoffDoublesAndCaps(t *testing.T) {
	e, _ := newEjector(t, Ejection{})
	s := newSet(2, nil)
	b := s.Backend(0)
	now := t0
	for k, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute,
		5 * time.Minute, 5 * time.Minute} {
		fail(e, s, 0, 5, now)
		if b.Healthy(now.Add(want - 1)) {
			t.Fatalf("ejection %d ended before %v", k+1, want)
		}
		if !b.Healthy(now.Add(want)) {
			t.Fatalf("ejection %d lasts beyond %v", k+1, want)
		}
		now = now.Add(want) // fail again the moment it returns
	}
	// Quiet for MaxTime after the last ejection ended: back to BaseTime.
	now = now.Add(5 * time.Minute)
	fail(e, s, 0, 5, now)
	if b.Healthy(now.Add(30*time.Second-1)) || !b.Healthy(now.Add(30*time.Second)) {
		t.Error("backoff did not reset to BaseTime after a quiet MaxTime")
	}
}

func TestEjectorStateCarriesAcrossReloadAndRetain(t *testing.T) {
	var ids []string
	e, err := NewEjector(Ejection{}, EjectorOptions{OnEject: func(id string, _ time.Time) { ids = append(ids, id) }})
	if err != nil {
		t.Fatal(err)
	}
	old := newSet(3, nil)
	fail(e, old, 2, 5, t0)
	fail(e, old, 1, 3, t0)
	next := newSet(2, old) // drops 10.0.0.3, keeps 10.0.0.2's run of 3
	fail(e, next, 1, 2, t0)
	if next.Backend(1).Healthy(t0) {
		t.Error("the run of failures did not carry over the reload")
	}
	e.Retain(next)
	if got := len(*e.states.Load()); got != 1 {
		t.Errorf("%d states after Retain; want 1", got)
	}
	if got := e.Ejections(); got["10.0.0.3:80"] != 1 || got["10.0.0.2:80"] != 1 {
		t.Errorf("Ejections() = %v; want both at 1 (the removed one kept)", got)
	}
	if fmt.Sprint(ids) != "[10.0.0.3:80 10.0.0.2:80]" {
		t.Errorf("OnEject saw %v", ids)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	e, _ := newEjector(t, Ejection{ConsecutiveFailures: 1 << 30})
	s := newSet(4, nil)
	fail(e, s, 0, 1, t0) // backend 0 has state; backend 1 has none
	for name, o := range map[string]balance.Outcome{"ok": balance.OK, "failed": balance.Failed, "canceled": balance.Canceled} {
		if n := testing.AllocsPerRun(1000, func() { e.Observe(s, 0, o, t0) }); n != 0 {
			t.Errorf("%s: %v allocs per Observe; want 0", name, n)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { e.Observe(s, 1, balance.OK, t0) }); n != 0 {
		t.Errorf("ok without state: %v allocs per Observe; want 0", n)
	}
}

func BenchmarkObserve(b *testing.B) {
	e, _ := NewEjector(Ejection{}, EjectorOptions{})
	s := newSet(10, nil)
	fail(e, s, 3, 1, t0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			o := balance.OK
			if i%7 == 0 {
				o = balance.Failed
			}
			e.Observe(s, i%10, o, t0)
			i++
		}
	})
}
