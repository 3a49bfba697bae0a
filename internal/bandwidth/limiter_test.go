package bandwidth

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustNew(t testing.TB, o Options) *Limiter {
	t.Helper()
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDefaults(t *testing.T) {
	o := Options{Rate: 50_000_000}.WithDefaults()
	if o.Burst != 5_000_000 || o.Chunk != DefaultChunk || o.MaxDelay != DefaultMaxDelay || o.Clock == nil {
		t.Fatalf("defaults for 50MB/s = %+v", o)
	}
	if o := (Options{Rate: 1000}).WithDefaults(); o.Burst != MinBurst {
		t.Fatalf("burst for 1000 B/s = %d, want MinBurst %d", o.Burst, MinBurst)
	}
	if o := (Options{Rate: 1000, Burst: 1000}).WithDefaults(); o.Chunk != 250 {
		t.Fatalf("chunk for burst 1000 = %d, want 250", o.Chunk)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{}, "rate:"},
		{Options{Rate: -1}, "rate:"},
		{Options{Rate: MaxRate + 1}, "rate:"},
		{Options{Rate: 1e6, Burst: -5}, "burst:"},
		{Options{Rate: 1e6, Burst: MaxBurst + 1}, "burst:"},
		{Options{Rate: 1e6, Chunk: -1}, "chunk:"},
		{Options{Rate: 1e6, Burst: 1 << 20, Chunk: 1<<19 + 1}, "burst:"},
		{Options{Rate: 1e6, MaxDelay: -time.Second}, "max_delay:"},
		{Options{Rate: 1 << 10, MaxDelay: time.Second}, "max_delay:"}, // a 16 KiB chunk takes 16 s
	} {
		_, err := New(tc.o)
		if err == nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an ErrInvalidOptions naming %q", tc.o, err, tc.field)
		}
	}
}

// conformance checks a schedule against the exact bound: over every window [s, s+W] of
// grant times, bytes ≤ rate·W + burst. It runs GCRA on the grants in time order in units of
// byte·ns, so there is no rounding: virtual TAT V′ = max(V, t·rate) + n·10⁹ must stay
// ≤ t·rate + burst·10⁹.
type grant struct {
	at int64 // ns since epoch
	n  int64
}

func checkConformance(t *testing.T, gs []grant, rate, burst int64) {
	t.Helper()
	slices.SortStableFunc(gs, func(a, b grant) int { return int(a.at - b.at) })
	var v int64
	for i, g := range gs {
		v = max(v, g.at*rate) + g.n*int64(time.Second)
		if v-g.at*rate > burst*int64(time.Second) {
			t.Fatalf("grant %d (%d bytes at %v) breaks the bound: %d byte·ns over", i, g.n, time.Duration(g.at),
				v-g.at*rate-burst*int64(time.Second))
		}
	}
}

// TestThroughputAndBound: k greedy flows, each asking for its next chunk the moment the
// previous one may pass, for 60 s. Every prefix admits ≤ rate·t + burst, every window
// conforms, and the long-run rate is within 1% of the configured one.
func TestThroughputAndBound(t *testing.T) {
	for _, k := range []int{1, 3, 50} {
		const rate, secs = 3_000_000, 60 // 3 MB/s: a 16 KiB chunk is 5461.33 µs, so rounding shows
		l := mustNew(t, Options{Name: "shop", Rate: rate, Clock: newDriver()})
		burst := Options{Rate: rate}.WithDefaults().Burst
		ask := make([]int64, k) // when each flow asks next, ns
		var gs []grant
		var total int64
		end := int64(secs * time.Second)
		for {
			i := 0
			for j := range ask {
				if ask[j] < ask[i] {
					i = j
				}
			}
			if ask[i] > end {
				break
			}
			r, err := l.ReserveAt(epoch.Add(time.Duration(ask[i])), l.Chunk())
			if err != nil {
				t.Fatalf("k=%d: %v", k, err)
			}
			at := int64(r.At().Sub(epoch))
			total += int64(l.Chunk())
			if total*int64(time.Second) > rate*at+burst*int64(time.Second) {
				t.Fatalf("k=%d: %d bytes admitted by %v, over rate·t + burst", k, total, time.Duration(at))
			}
			gs = append(gs, grant{at, int64(l.Chunk())})
			ask[i] = at
		}
		checkConformance(t, gs, rate, burst)
		last := gs[len(gs)-1].at
		got := float64(total-burst) / (float64(last) / 1e9)
		if got < rate*0.99 || got > rate*1.0001 {
			t.Errorf("k=%d: sustained %.0f B/s, want %d ±1%%", k, got, rate)
		}
	}
}

// TestCancelKeepsBound reserves and cancels at random (last and middle reservations,
// pending or not) and checks that what was granted still conforms.
func TestCancelKeepsBound(t *testing.T) {
	const rate = 1 << 20
	for seed := range uint64(60) {
		step := []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}[seed%3]
		rng := rand.New(rand.NewPCG(seed, 1))
		l := mustNew(t, Options{Rate: rate, MaxDelay: time.Hour, Clock: newDriver()})
		burst := Options{Rate: rate}.WithDefaults().Burst
		var now int64
		type res struct {
			r    Reservation
			gone bool
		}
		var rs []res
		for range 5000 {
			now += rng.Int64N(int64(step))
			switch {
			case rng.IntN(2) == 0 && len(rs) > 0:
				i := len(rs) - 1 - rng.IntN(min(len(rs), 8))
				if !rs[i].gone && int64(rs[i].r.At().Sub(epoch)) > now {
					rs[i].r.CancelAt(epoch.Add(time.Duration(now)))
					rs[i].gone = true
				}
			default:
				r, err := l.ReserveAt(epoch.Add(time.Duration(now)), 1+rng.IntN(l.Chunk()))
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, res{r: r})
			}
		}
		var gs []grant
		var bytes int64
		for _, r := range rs {
			if !r.gone {
				gs = append(gs, grant{int64(r.r.At().Sub(epoch)), r.r.n})
				bytes += r.r.n
			}
		}
		checkConformance(t, gs, rate, burst)
		if st := l.Stats(); st.Bytes != bytes {
			t.Fatalf("Stats.Bytes = %d, want %d granted", st.Bytes, bytes)
		}
	}
}

func TestReserveAtRange(t *testing.T) {
	l := mustNew(t, Options{Rate: 1 << 20, Clock: newDriver()})
	for _, n := range []int{0, -1, l.Chunk() + 1} {
		if _, err := l.ReserveAt(epoch, n); !errors.Is(err, ErrInvalidN) {
			t.Errorf("ReserveAt(%d) = %v, want ErrInvalidN", n, err)
		}
	}
}

// slowLimiter: 16 KiB/s, so a 16 KiB chunk takes exactly 1 s; burst 64 KiB (4 chunks);
// MaxDelay 5 s.
func slowLimiter(t *testing.T) (*Limiter, *driver) {
	d := newDriver()
	return mustNew(t, Options{Name: "shop", Rate: 16 << 10, MaxDelay: 5 * time.Second, Clock: d}), d
}

func TestMaxDelayCuts(t *testing.T) {
	l, d := slowLimiter(t)
	for i := range 9 { // 4 at once, then waits of 1 s … 5 s
		r, err := l.ReserveAt(d.Now(), l.Chunk())
		if err != nil {
			t.Fatalf("reservation %d: %v", i, err)
		}
		if want := time.Duration(max(i-3, 0)) * time.Second; r.Delay() != want {
			t.Fatalf("reservation %d waits %v, want %v", i, r.Delay(), want)
		}
	}
	_, err := l.ReserveAt(d.Now(), l.Chunk())
	var tse *TooSlowError
	if !errors.Is(err, ErrTooSlow) || !errors.As(err, &tse) || tse.Limit != "shop" || tse.Wait != 6*time.Second {
		t.Fatalf("10th reservation: %v, want a TooSlowError for shop waiting 6s", err)
	}
	if st := l.Stats(); st.Cut != 1 || st.Bytes != 9*16<<10 || st.DelayedBytes != 5*16<<10 || st.Delay != 15*time.Second {
		t.Fatalf("Stats = %+v", st)
	}
	// The refused chunk left nothing behind: a second later the next one waits 5 s.
	d.Advance(time.Second)
	if r, err := l.ReserveAt(d.Now(), l.Chunk()); err != nil || r.Delay() != 5*time.Second {
		t.Fatalf("after a cut: %v, %v; want a 5s wait", r.Delay(), err)
	}

	// Through a Writer: refused at once, nothing written, no timer, counted.
	var sink countWriter
	n, err := l.Writer(context.Background(), &sink).Write(make([]byte, 100))
	if n != 0 || !errors.As(err, &tse) || sink.n != 0 || d.Pending() != 0 {
		t.Fatalf("Write = %d, %v (sink %d, pending timers %d); want 0 and a TooSlowError", n, err, sink.n, d.Pending())
	}
	if st := l.Stats(); st.Cut != 2 {
		t.Fatalf("Stats.Cut = %d, want 2", st.Cut)
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// deadlineCtx carries a deadline on the fake clock and never ends by itself.
type deadlineCtx struct {
	context.Context
	dl time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }

func TestCancelReturnsPromptlyAndGivesBack(t *testing.T) {
	l, d := slowLimiter(t)
	for range 5 { // burst spent and one chunk queued: the next waits 2 s
		if _, err := l.ReserveAt(d.Now(), l.Chunk()); err != nil {
			t.Fatal(err)
		}
	}
	before := l.Stats()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.WaitN(ctx, l.Chunk()) }()
	<-d.TimerCreated()
	cancel() // no Advance: the wait must end on the cancel alone
	g := time.NewTimer(guard)
	defer g.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitN = %v, want context.Canceled", err)
		}
	case <-g.C:
		t.Fatal("WaitN did not return after cancel")
	}
	if d.Pending() != 0 {
		t.Fatalf("%d timers left running", d.Pending())
	}
	if st := l.Stats(); st != before {
		t.Fatalf("Stats after cancel = %+v, want %+v", st, before)
	}
	// The slot came back: the next chunk waits 2 s, as the cancelled one did.
	if r, err := l.ReserveAt(d.Now(), l.Chunk()); err != nil || r.Delay() != 2*time.Second {
		t.Fatalf("after cancel: %v, %v; want a 2s wait", r.Delay(), err)
	}
}

func TestCancelBehindOthersIsNotReordered(t *testing.T) {
	l, d := slowLimiter(t)
	for range 4 {
		_, _ = l.ReserveAt(d.Now(), l.Chunk())
	}
	a, _ := l.ReserveAt(d.Now(), l.Chunk()) // at 1 s
	b, _ := l.ReserveAt(d.Now(), l.Chunk()) // at 2 s
	a.CancelAt(d.Now())
	if b.Delay() != 2*time.Second {
		t.Fatalf("b waits %v", b.Delay())
	}
	// a's slot stays unused; later ones still queue behind b.
	if c, _ := l.ReserveAt(d.Now(), l.Chunk()); c.Delay() != 3*time.Second {
		t.Fatalf("c waits %v, want 3s (behind b)", c.Delay())
	}
	// A reservation whose time has come is not given back.
	d.Advance(3 * time.Second)
	tat := l.tat
	b.CancelAt(d.Now())
	if l.tat != tat {
		t.Fatal("a passed reservation was given back")
	}
}

func TestDeadlineRefusedUpFront(t *testing.T) {
	l, d := slowLimiter(t)
	for range 5 {
		_, _ = l.ReserveAt(d.Now(), l.Chunk())
	}
	ctx := deadlineCtx{context.Background(), d.Now().Add(1500 * time.Millisecond)}
	err := l.WaitN(ctx, l.Chunk()) // would wait 2 s
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTooSlow) {
		t.Fatalf("WaitN = %v, want a deadline error", err)
	}
	if d.Pending() != 0 || l.Stats().Cut != 0 {
		t.Fatalf("refusal left %d timers, %d cuts", d.Pending(), l.Stats().Cut)
	}
	if r, _ := l.ReserveAt(d.Now(), l.Chunk()); r.Delay() != 2*time.Second {
		t.Fatalf("refusal reserved: next waits %v, want 2s", r.Delay())
	}
	// An ended context is refused before anything else.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitN(done, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitN(ended ctx) = %v", err)
	}
}

func TestNilLimiterIsUnlimited(t *testing.T) {
	var l *Limiter
	var w countWriter
	if got := l.Writer(context.Background(), &w); got != &w {
		t.Fatal("nil limiter wrapped the writer")
	}
	r := strings.NewReader("x")
	if got := l.Reader(context.Background(), r); got != r {
		t.Fatal("nil limiter wrapped the reader")
	}
	if err := l.WaitN(context.Background(), 1<<30); err != nil {
		t.Fatal(err)
	}
}
