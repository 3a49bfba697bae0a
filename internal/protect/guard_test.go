package protect

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func perSecond(n int) time.Duration { return time.Second / time.Duration(n) }

// reason is the refusal's reason, "" for an admission.
func reason(t *testing.T, err error) admit.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	var rej *admit.Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("refusal %v is not an *admit.Rejection", err)
	}
	if rej.RetryAfter <= 0 {
		t.Fatalf("refusal %v has no Retry-After", rej)
	}
	return rej.Reason
}

// TestGuardRateShedsTheAbuserOnly: a pool of 150/s; ten clients at 10/s
// each and one at 200/s (20x). Over 10 s on a fake clock every request of
// the ten is admitted, the abuser gets what is left, and the pool never
// passes rate·t + burst.
func TestGuardRateShedsTheAbuserOnly(t *testing.T) {
	clk := clock.NewFake(epoch)
	const rate, burst = 150, 30
	g := New(Options{Rate: ratelimit.Limit{Interval: perSecond(rate), Burst: burst}, Clock: clk})
	light, lightOK, abuse, abuseOK := 0, 0, 0, 0
	byReason := map[admit.Reason]int{}
	for ms := range 10_000 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if ms%5 == 0 { // the abuser: every 5 ms
			abuse++
			s, err := g.Enter(context.Background(), "abuser", now)
			if r := reason(t, err); r == "" {
				abuseOK++
				s.Release()
			} else {
				byReason[r]++
			}
		}
		if ms%10 == 0 { // client i at offset 10·i ms of each 100 ms
			i := (ms / 10) % 10
			light++
			s, err := g.Enter(context.Background(), "light-"+strconv.Itoa(i), now)
			if r := reason(t, err); r != "" {
				t.Fatalf("at %dms: well-behaved client %d refused (%s)", ms, i, r)
			}
			lightOK++
			s.Release()
		}
		if total := lightOK + abuseOK; total > rate*(ms+1)/1000+burst {
			t.Fatalf("at %dms: %d admitted, over rate·t + burst", ms, total)
		}
	}
	// The abuser gets the rest of the rate: 150 − 100 per second, less the reserve it cannot touch.
	if abuseOK < 45*10 || abuseOK > 50*10+burst {
		t.Fatalf("abuser admitted %d of %d, want about (150−100)/s × 10 s", abuseOK, abuse)
	}
	if byReason[ReasonShare] == 0 || len(byReason) != 1 {
		t.Fatalf("abuser refusals %v, want backend-share only", byReason)
	}
	t.Logf("light %d/%d, abuser %d/%d, refusals %v", lightOK, light, abuseOK, abuse, byReason)
}

// TestGuardRateEvenWhenAllAreEqual: eleven equal clients offering twice the
// pool's rate are refused alike (an empty bucket refuses whoever comes),
// none starved, and the total is exact.
func TestGuardRateEvenWhenAllAreEqual(t *testing.T) {
	clk := clock.NewFake(epoch)
	const rate, burst = 100, 10
	g := New(Options{Rate: ratelimit.Limit{Interval: perSecond(rate), Burst: burst}, Clock: clk})
	admitted := map[string]int{}
	total := 0
	for ms := range 10_000 {
		now := epoch.Add(time.Duration(ms) * time.Millisecond)
		if ms%5 != 0 {
			continue
		}
		c := "c" + strconv.Itoa((ms/5)%11)
		if s, err := g.Enter(context.Background(), c, now); err == nil {
			admitted[c]++
			total++
			s.Release()
		}
	}
	if total > rate*10+burst || total < rate*10 {
		t.Fatalf("admitted %d over 10 s, want %d..%d", total, rate*10, rate*10+burst)
	}
	lo, hi := total, 0
	for _, n := range admitted {
		lo, hi = min(lo, n), max(hi, n)
	}
	if len(admitted) != 11 || float64(hi) > 1.5*float64(lo) {
		t.Fatalf("admitted by client %v: uneven among equal clients", admitted)
	}
}

// TestGuardInflightFairShare: at its inflight limit, a client holding its
// share is refused at once while another client waits for the next slot.
func TestGuardInflightFairShare(t *testing.T) {
	clk := clock.NewFake(epoch)
	g := New(Options{Inflight: 4, Wait: admit.Limits{MaxWait: time.Second}, Clock: clk})
	var held []Slot
	for range 4 {
		s, err := g.Enter(context.Background(), "abuser", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	if st := g.Stats(); st.InFlight != 4 || st.InflightLimit != 4 {
		t.Fatalf("Stats = %+v", st)
	}
	admitted := make(chan error, 1)
	go func() {
		s, err := g.Enter(context.Background(), "light", clk.Now())
		if err == nil {
			s.Release() // before reporting: the test then reads the guard at rest
		}
		admitted <- err
	}()
	<-clk.TimerCreated() // light waits
	if _, err := g.Enter(context.Background(), "abuser", clk.Now()); reason(t, err) != Prefix+admit.ClientShare {
		t.Fatalf("abuser over its share: %v, want backend-client-share", err)
	}
	held[0].Release()
	if err := <-admitted; err != nil {
		t.Fatalf("light client after a slot freed: %v", err)
	}
	for _, s := range held[1:] {
		s.Release()
	}
	if st := g.Stats(); st.InFlight != 0 {
		t.Fatalf("after all released: %+v", st)
	}
}

// TestGuardQueueTimeout: a request that cannot get a slot within the wait
// is refused backend-queue-timeout.
func TestGuardQueueTimeout(t *testing.T) {
	clk := clock.NewFake(epoch)
	g := New(Options{Inflight: 1, Wait: admit.Limits{MaxWait: 50 * time.Millisecond}, Clock: clk})
	s, err := g.Enter(context.Background(), "a", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	done := make(chan error, 1)
	go func() { _, err := g.Enter(context.Background(), "b", clk.Now()); done <- err }()
	<-clk.TimerCreated()
	clk.Advance(50 * time.Millisecond)
	if r := reason(t, <-done); r != Prefix+admit.QueueTimeout {
		t.Fatalf("got %s, want backend-queue-timeout", r)
	}
}

func TestGuardOff(t *testing.T) {
	if g := New(Options{}); g != nil {
		t.Fatal("a guard with both limits off is not nil")
	}
	if st := (*Guard)(nil).Stats(); st != (Stats{}) {
		t.Fatalf("nil guard stats %+v", st)
	}
}

// BenchmarkGuardEnter is one backend_limits decision and release: an
// inflight slot and a token, for one of 32 clients (all tracked by the
// heavy-client sketch; beyond its 64 slots a new client costs a key copy).
func BenchmarkGuardEnter(b *testing.B) {
	clk := clock.NewFake(epoch)
	g := New(Options{Inflight: 1 << 20, Rate: ratelimit.Limit{Interval: time.Nanosecond, Burst: 1 << 20}, Clock: clk})
	keys := make([]string, 32)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s, err := g.Enter(ctx, keys[i%len(keys)], epoch.Add(time.Duration(i))) // a token a nanosecond
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
		i++
	}
}

// BenchmarkGuardRefuseHeavy is the refusal of a heavy client below the
// reserve: the path an abuser's requests take under overload.
func BenchmarkGuardRefuseHeavy(b *testing.B) {
	clk := clock.NewFake(epoch)
	g := New(Options{Rate: ratelimit.Limit{Interval: time.Hour, Burst: 10}, Clock: clk})
	for range 10 {
		g.Enter(context.Background(), "light", epoch)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Enter(ctx, "abuser", epoch); err == nil {
			b.Fatal("admitted")
		}
	}
}

// statusSlot records the status its slot was given back with.
type statusSlot struct{ code int }

func (s *statusSlot) Release()               { s.code = -1 }
func (s *statusSlot) ReleaseStatus(code int) { s.code = code }

// TestHeldReleasesBothSlots: a Held gives the pool's slot back and the
// app's with the status sent.
func TestHeldReleasesBothSlots(t *testing.T) {
	g := New(Options{Inflight: 1, Clock: clock.NewFake(epoch)})
	pool, err := g.Enter(context.Background(), "c", epoch)
	if err != nil {
		t.Fatal(err)
	}
	app := &statusSlot{}
	h := &Held{App: app, Pool: pool}
	if g.Stats().InFlight != 1 {
		t.Fatalf("stats %+v; want one in flight", g.Stats())
	}
	admit.Release(h, 503)
	if g.Stats().InFlight != 0 || app.code != 503 {
		t.Errorf("after ReleaseStatus(503): stats %+v, the app's slot got %d", g.Stats(), app.code)
	}
}
