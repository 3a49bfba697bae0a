package cluster

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/redistest"
	"github.com/leveeproxy/levee/internal/testlog"
)

// t0 is the fake start time: a real date, since Redis stores TATs as µs
// since the Unix epoch.
var t0 = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

// lim is 1000 requests per second with a burst of 100.
var lim = ratelimit.Limit{Interval: time.Millisecond, Burst: 100}

type instance struct {
	c     *Cluster
	store *Store
	log   *testlog.Buffer
}

// instances makes n instances sharing one Redis under a prefix of their own.
func instances(t *testing.T, r *redistest.Server, n int, o Options) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		o := o
		o.Addrs = []string{r.Addr()}
		if o.Prefix == "" {
			o.Prefix = "test-" + strings.ReplaceAll(t.Name(), "/", "-")
		}
		o.Instance = fmt.Sprintf("i%d", i)
		if o.Timeout == 0 {
			o.Timeout = 5 * time.Second // a loaded test machine must not look like a Redis failure
		}
		buf := &testlog.Buffer{}
		o.Logger = slog.New(slog.NewTextHandler(buf, nil))
		c, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		st, err := c.Store("app", 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &instance{c: c, store: st, log: buf}
	}
	return out
}

// drive offers perMs requests every millisecond of fake time for d from
// start, sent to the instances unevenly (6:3:1 over three), and returns how
// many were admitted. Each step waits for background takes, so the count is
// the same on every run.
func drive(insts []*instance, start time.Time, d time.Duration, perMs int, tick func(now time.Time)) int {
	weights := []int{6, 3, 1}
	var order []int // request i of a cycle goes to order[i%len(order)]
	for i := range insts {
		for range weights[i%len(weights)] {
			order = append(order, i)
		}
	}
	admitted, next := 0, 0
	for ms := time.Duration(0); ms < d; ms += time.Millisecond {
		now := start.Add(ms)
		if tick != nil && ms%time.Second == 0 {
			tick(now)
		}
		for range perMs {
			in := insts[order[next%len(order)]]
			next++
			if in.store.AllowAt("\x00app", lim, now, 1).Allowed {
				admitted++
			}
		}
		for _, in := range insts {
			in.c.quiesce()
		}
	}
	return admitted
}

// TestTopologyNeverChangesTheLimit: 1, 2 or 3 instances at 5x the limit,
// spread unevenly, admit the configured rate within ±2% over 5 s.
func TestTopologyNeverChangesTheLimit(t *testing.T) {
	r := redistest.Start(t)
	for n := 1; n <= 3; n++ {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			insts := instances(t, r, n, Options{})
			warm := drive(insts, t0, time.Second, 5, nil) // drains the burst
			if warm < 1000 || warm > 1000+lim.Burst {
				t.Errorf("first second admitted %d, want 1000..%d", warm, 1000+lim.Burst)
			}
			got := drive(insts, t0.Add(time.Second), 5*time.Second, 5, nil)
			const want = 5000 // 1000/s for 5 s
			if got < want*98/100 || got > want*102/100 {
				t.Errorf("admitted %d in 5 s at 5x load, want %d ± 2%%", got, want)
			}
			var trips uint64
			for _, in := range insts {
				trips += in.c.RoundTrips()
			}
			// 30,000 requests offered: far fewer than one round trip each.
			if trips > 30000/5 {
				t.Errorf("%d round trips for 30000 requests, want ≤ 6000", trips)
			}
			t.Logf("admitted %d (first second %d), %d round trips", got, warm, trips)
		})
	}
}

// TestUnsaturatedDecidesLocally: below the limit nearly every request is
// admitted from a lease, and the total matches local GCRA.
func TestUnsaturatedDecidesLocally(t *testing.T) {
	r := redistest.Start(t)
	insts := instances(t, r, 3, Options{})
	// 3 requests per ms against 1000/s: limited, but check a light load first.
	got := 0
	for ms := range 3000 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if ms%2 == 0 { // 500/s
			if insts[ms%3].store.AllowAt("\x00app", lim, now, 1).Allowed {
				got++
			}
		}
		for _, in := range insts {
			in.c.quiesce()
		}
	}
	if got != 1500 {
		t.Errorf("admitted %d of 1500 at half the limit", got)
	}
	var trips uint64
	for _, in := range insts {
		trips += in.c.RoundTrips()
	}
	if trips > 1500/3 {
		t.Errorf("%d round trips for 1500 requests under the limit, want ≤ 500", trips)
	}
}

// one is one request an hour: a second request is refused.
var one = ratelimit.Limit{Interval: time.Hour, Burst: 1}

// secondStore starts Redis and one instance, and gives it a second store
// for app, holding at most maxKeys keys locally.
func secondStore(t *testing.T, app string, maxKeys int) (*instance, *Store) {
	t.Helper()
	in := instances(t, redistest.Start(t), 1, Options{})[0]
	st, err := in.c.Store(app, maxKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, st
}

// TestKeysAreNamespaced: two apps, or two keys of one app, never share a bucket.
func TestKeysAreNamespaced(t *testing.T) {
	in, other := secondStore(t, "other", 100)
	for _, st := range []*Store{in.store, other} {
		for _, key := range []string{"a", "b"} {
			if !st.AllowAt(key, one, t0, 1).Allowed {
				t.Errorf("%s %s: first request refused", st.prefix, key)
			}
			if d := st.AllowAt(key, one, t0, 1); d.Allowed || d.RetryAfter <= 0 {
				t.Errorf("%s %s: second request %+v, want refused with a retry", st.prefix, key, d)
			}
		}
	}
}

// TestRedisDownAndBack: with Redis killed mid-run, serving goes on, the
// three instances together admit at most the limit + 10%, the state change
// is logged once, and after Redis returns the limit is exact again.
func TestRedisDownAndBack(t *testing.T) {
	r := redistest.Start(t)
	// A killed server's socket is gone: calls fail at once, whatever the timeout.
	insts := instances(t, r, 3, Options{})
	tick := func(now time.Time) {
		for _, in := range insts {
			in.c.Tick(now)
		}
	}
	tick(t0)
	tick(t0) // the first instance learns of the later ones
	if insts[0].c.Live() != 3 {
		t.Fatalf("live instances %d, want 3", insts[0].c.Live())
	}
	at := t0
	drive(insts, at, 2*time.Second, 5, tick) // saturated
	at = at.Add(2 * time.Second)

	r.Stop()
	down := drive(insts, at, 3*time.Second, 5, tick)
	at = at.Add(3 * time.Second)
	for i, in := range insts {
		if !in.c.Degraded() {
			t.Errorf("instance %d not degraded with Redis down", i)
		}
	}
	// 3 s at 1000/s plus one burst; each instance's share is a third of both.
	const bound = (3000 + 100) * 110 / 100
	if down > bound || down < 3000*90/100 {
		t.Errorf("admitted %d in 3 s with Redis down, want ≤ %d (limit + 10%%) and ≥ 2700 (still serving)", down, bound)
	}

	r.Restart()
	tick(at)
	for i, in := range insts {
		if in.c.Degraded() {
			t.Errorf("instance %d still degraded after Redis came back", i)
		}
	}
	drive(insts, at, time.Second, 5, tick) // the fresh Redis's burst
	at = at.Add(time.Second)
	back := drive(insts, at, 5*time.Second, 5, tick)
	if back < 5000*98/100 || back > 5000*102/100 {
		t.Errorf("admitted %d in 5 s after recovery, want 5000 ± 2%%", back)
	}
	for i, in := range insts {
		log := in.log.String()
		if n := strings.Count(log, "redis unreachable"); n != 1 {
			t.Errorf("instance %d logged 'unreachable' %d times, want 1:\n%s", i, n, log)
		}
		if n := strings.Count(log, "reachable again"); n != 1 {
			t.Errorf("instance %d logged 'reachable again' %d times, want 1:\n%s", i, n, log)
		}
	}
	t.Logf("down: %d admitted in 3 s; back: %d in 5 s", down, back)
}

// TestFullTableStillLimits: with the local table full of busy keys, a new
// key is decided in Redis directly, still under its limit.
func TestFullTableStillLimits(t *testing.T) {
	_, st := secondStore(t, "small", 2)
	for _, k := range []string{"a", "b", "c"} {
		if !st.AllowAt(k, one, t0, 1).Allowed {
			t.Errorf("%s: first request refused", k)
		}
	}
	if len(st.keys) != 2 {
		t.Errorf("table holds %d keys, want its bound 2", len(st.keys))
	}
	if d := st.AllowAt("c", one, t0.Add(time.Minute), 1); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("c again, decided in Redis: %+v; want refused with a retry", d)
	}
}

// TestRedisCluster: the same limits through a Redis Cluster of three
// masters (the universal client with several addresses).
func TestRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	insts := make([]*instance, 3)
	for i := range insts {
		c, err := New(Options{Addrs: addrs, Prefix: "rc", Instance: fmt.Sprintf("i%d", i), Timeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&testlog.Buffer{}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		st, err := c.Store("app", 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		insts[i] = &instance{c: c, store: st}
	}
	for range 2 {
		for _, in := range insts {
			in.c.Tick(t0)
		}
	}
	if live := insts[0].c.Live(); live != 3 || insts[0].c.Degraded() {
		t.Fatalf("live %d, degraded %v; want 3 live, not degraded", live, insts[0].c.Degraded())
	}
	drive(insts, t0, time.Second, 5, nil)
	got := drive(insts, t0.Add(time.Second), 3*time.Second, 5, nil)
	if got < 3000*98/100 || got > 3000*102/100 {
		t.Errorf("admitted %d in 3 s at 5x load through a Redis Cluster, want 3000 ± 2%%", got)
	}
	// Keys of other apps hash to other slots, on other nodes: still one bucket each.
	for i := range 20 {
		st, err := insts[0].c.Store(fmt.Sprintf("app%d", i), 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !st.AllowAt("k", one, t0, 1).Allowed || st.AllowAt("k", one, t0, 1).Allowed {
			t.Errorf("app%d: want the first request admitted and the second refused", i)
		}
	}
	if f := insts[0].c.Failures(); f != 0 {
		t.Errorf("%d Redis calls failed", f)
	}
}

// TestDecisionProbesRedis: while degraded, one decision per probe gap asks
// Redis again, so an outage shorter than a heartbeat ends with it.
func TestDecisionProbesRedis(t *testing.T) {
	r := redistest.Start(t)
	// No heartbeat runs in this test; the probe gap is twice the timeout, at most the heartbeat.
	in := instances(t, r, 1, Options{Heartbeat: time.Minute})[0]
	gap := in.c.probeGap
	r.Stop()
	in.store.AllowAt("k", lim, t0, 1)
	if !in.c.Degraded() {
		t.Fatal("not degraded after a failed call")
	}
	r.Restart()
	in.store.AllowAt("k", lim, t0.Add(gap-time.Microsecond), 1)
	if !in.c.Degraded() {
		t.Fatal("a decision before the probe gap asked Redis")
	}
	if !in.store.AllowAt("k", lim, t0.Add(gap), 1).Allowed || in.c.Degraded() {
		t.Fatalf("the decision at the probe gap did not bring the cluster back (degraded %v)", in.c.Degraded())
	}
}

// TestStalledRedisCostsOneDeadline: a Redis that accepts and never answers
// (SIGSTOP) costs the decisions waiting on a key one call's deadline in
// all: those that arrive while the first one's take is in flight wait for
// it, not for takes of their own, and once it fails everyone decides under
// the fair share at once. Never unlimited: the share's burst is all there is.
func TestStalledRedisCostsOneDeadline(t *testing.T) {
	leaktest.Check(t)
	const timeout = 200 * time.Millisecond
	r := redistest.Start(t)
	in := instances(t, r, 1, Options{Timeout: timeout, Heartbeat: time.Minute})[0]
	if !in.store.AllowAt("warm", lim, t0, 1).Allowed || in.c.Degraded() {
		t.Fatal("no decision with Redis up")
	}
	r.Pause()
	calls := in.c.RoundTrips()
	const n = 8
	var wg sync.WaitGroup
	took := make(chan time.Duration, n)
	admitted := make(chan bool, n)
	for range n {
		wg.Go(func() {
			start := time.Now()
			admitted <- in.store.AllowAt("k", lim, t0, 1).Allowed
			took <- time.Since(start)
		})
	}
	wg.Wait()
	close(took)
	close(admitted)
	for d := range took {
		// The margin only catches a wait the deadline did not end.
		if d > timeout+3*time.Second {
			t.Errorf("a decision took %v with Redis stalled; want about the %v deadline at most", d, timeout)
		}
	}
	if got := in.c.RoundTrips() - calls; got != 1 {
		t.Errorf("%d Redis calls for %d concurrent decisions on a stalled Redis, want 1 (the others wait for it)", got, n)
	}
	if !in.c.Degraded() {
		t.Fatal("not degraded after a call passed its deadline")
	}
	// The fair share of one live instance is the whole limit, burst 100 at t0.
	total := 0
	for ok := range admitted {
		if ok {
			total++
		}
	}
	for range 3 * lim.Burst {
		if in.store.AllowAt("k", lim, t0, 1).Allowed {
			total++
		}
	}
	if total != lim.Burst {
		t.Errorf("admitted %d at one instant with Redis stalled, want the burst, %d", total, lim.Burst)
	}

	r.Resume()
	in.store.AllowAt("k", lim, t0.Add(in.c.probeGap), 1)
	if in.c.Degraded() {
		t.Error("still degraded after Redis resumed and a decision probed it")
	}
}
