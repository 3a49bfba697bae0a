package bandwidth

import (
	"context"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// flows simulates k greedy connections on a fake clock through ReserveAt:
// each holds one reservation and asks for its next chunk the moment the
// previous one may pass (At, which SetRate re-times). It returns the bytes
// passed at each step of dt.
type flows struct {
	l   *Limiter
	clk *clock.Fake
	rs  []Reservation
}

func newFlows(t *testing.T, l *Limiter, clk *clock.Fake, k int) *flows {
	f := &flows{l: l, clk: clk, rs: make([]Reservation, k)}
	for i := range f.rs {
		r, err := l.ReserveAt(clk.Now(), l.Chunk())
		if err != nil {
			t.Fatal(err)
		}
		f.rs[i] = r
	}
	return f
}

// step moves the clock by dt and returns the bytes that passed by then.
func (f *flows) step(t *testing.T, dt time.Duration) int64 {
	f.clk.Advance(dt)
	now := f.clk.Now()
	var passed int64
	for i, r := range f.rs {
		if r.At().After(now) {
			continue
		}
		passed += r.n
		nr, err := f.l.ReserveAt(now, f.l.Chunk())
		if err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
		f.rs[i] = nr
	}
	return passed
}

// TestSetRateBound: a saturated limiter changed down and then up keeps
// bytes passed ≤ new rate·t + Burst over every prefix after each change,
// hands out no fresh burst (right after a change the bucket is as empty as
// before) and settles at the new rate.
func TestSetRateBound(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	const rate, burst = 1 << 20, 256 << 10
	l := mustNew(t, Options{Rate: rate, Burst: burst, Clock: clk})
	chunk := int64(l.Chunk())
	f := newFlows(t, l, clk, 8)
	const dt = time.Millisecond
	for range 2000 { // saturate: the burst is long spent
		f.step(t, dt)
	}
	for _, newRate := range []int64{rate / 4, rate * 2, rate / 16} {
		l.SetRate(newRate)
		if got := l.Rate(); got != newRate {
			t.Fatalf("Rate() = %d after SetRate(%d)", got, newRate)
		}
		var sum int64
		for i := 1; i <= 3000; i++ {
			sum += f.step(t, dt)
			el := int64(i) * int64(dt)
			if bound := newRate*el/int64(time.Second) + burst; sum > bound {
				t.Fatalf("rate %d: %d bytes passed %v after the change; bound rate·t + burst = %d", newRate, sum, time.Duration(el), bound)
			}
			// No fresh burst: the queue was full, so even the first
			// milliseconds pass no more than the rate plus the chunks of
			// the flows already due.
			if i == 50 {
				if most := newRate*el/int64(time.Second) + int64(len(f.rs))*chunk; sum > most {
					t.Fatalf("rate %d: %d bytes in the first %v; a fresh burst (want ≤ %d)", newRate, sum, time.Duration(el), most)
				}
			}
		}
		// Settled: the last 2 s ran at the new rate within a chunk per flow.
		var late int64
		for range 2000 {
			late += f.step(t, dt)
		}
		if want := newRate * 2; late < want-int64(len(f.rs))*chunk || late > want+int64(len(f.rs))*chunk {
			t.Fatalf("rate %d: %d bytes in 2 s, want %d ± %d", newRate, late, want, int64(len(f.rs))*chunk)
		}
	}
}

// TestSetRateKeepsIdleBucket: an idle limiter's full burst is not grown by
// a change, and a half-spent one stays half spent in bytes.
func TestSetRateKeepsIdleBucket(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	l := mustNew(t, Options{Rate: 1 << 20, Burst: 256 << 10, Chunk: 16 << 10, Clock: clk})
	for range 8 { // half the burst
		if r, err := l.ReserveAt(clk.Now(), 16<<10); err != nil || r.Delay() != 0 {
			t.Fatalf("%v %v", r.Delay(), err)
		}
	}
	l.SetRate(1 << 16) // 16× slower
	for i := range 8 {
		if r, err := l.ReserveAt(clk.Now(), 16<<10); err != nil || r.Delay() != 0 {
			t.Fatalf("chunk %d of the rest of the burst waits %v, %v", i, r.Delay(), err)
		}
	}
	r, err := l.ReserveAt(clk.Now(), 16<<10)
	if err != nil || r.Delay() < 249*time.Millisecond || r.Delay() > 251*time.Millisecond {
		t.Fatalf("past the burst: wait %v, %v; want 250ms (16 KiB at 64 KiB/s)", r.Delay(), err)
	}
}

// TestSetRateSlowsQueuedWaiter: a waiter queued at the old rate is woken
// by a lowered rate and waits its new, longer time; a raised rate lets it
// go at once.
func TestSetRateSlowsQueuedWaiter(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	l := mustNew(t, Options{Rate: 100_000, Burst: 64 << 10, Chunk: 16 << 10, Clock: clk})
	for range 4 { // the burst
		if _, err := l.ReserveAt(clk.Now(), 16<<10); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() chan error {
		errc := make(chan error, 1)
		go func() { errc <- l.WaitN(context.Background(), 16<<10) }()
		<-clk.TimerCreated()
		return errc
	}
	done := func(errc chan error) bool {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	}
	errc := wait() // 16384 B at 100 kB/s: 163.84 ms
	l.SetRate(10_000)
	<-clk.TimerCreated() // woken and re-timed: 1.6384 s
	clk.Advance(200 * time.Millisecond)
	if done(errc) {
		t.Fatal("the waiter passed at its old time after the rate was lowered")
	}
	clk.Advance(1400 * time.Millisecond)
	if done(errc) {
		t.Fatal("the waiter passed before its new time (1.6384 s)")
	}
	clk.Advance(40 * time.Millisecond)
	if !waitDone(t, errc) {
		t.Fatal("the waiter did not pass at its new time")
	}

	errc = wait() // the bucket is empty: 1.6384 s at 10 kB/s
	l.SetRate(1_000_000)
	<-clk.TimerCreated() // re-timed: 16.384 ms at 1 MB/s
	clk.Advance(17 * time.Millisecond)
	if !waitDone(t, errc) {
		t.Fatal("a raised rate did not let the waiter go at its new time")
	}
}

// waitDone waits (bounded) for a waiter already due to return.
func waitDone(t *testing.T, errc chan error) bool {
	t.Helper()
	g := time.NewTimer(guard)
	defer g.Stop()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
		return true
	case <-g.C:
		return false
	}
}

// TestDemand: Asked counts every byte asked for; Waiting is the queue and
// Queued its integral.
func TestDemand(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	l := mustNew(t, Options{Rate: 1 << 16, Burst: 64 << 10, Chunk: 16 << 10, Clock: clk})
	for range 6 { // 4 pass at once, 2 queue
		if _, err := l.ReserveAt(clk.Now(), 16<<10); err != nil {
			t.Fatal(err)
		}
	}
	d := l.Demand()
	if d.Asked != 6*16<<10 || d.Asks != 6 || d.Waiting < 2*16<<10-1 || d.Waiting > 2*16<<10 {
		t.Fatalf("Demand = %+v, want Asked %d, Waiting %d", d, 6*16<<10, 2*16<<10)
	}
	clk.Advance(time.Second) // 64 KiB more may pass: both queued ones
	// The queue fell from 32 KiB (0.5 s at 64 KiB/s) to none in 0.5 s:
	// 8 KiB·s queued.
	if d := l.Demand(); d.Asked != 6*16<<10 || d.Waiting != 0 || d.Queued < 8191 || d.Queued > 8193 {
		t.Fatalf("a second later Demand = %+v, want nothing waiting and 8192 byte·s queued", d)
	}
}
