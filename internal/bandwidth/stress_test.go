package bandwidth

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// meter counts bytes on the real clock and checks, after every grant, that the bytes so
// far are ≤ rate·elapsed + burst, elapsed read after the count (so it only errs loose).
type meter struct {
	t           *testing.T
	start       time.Time
	rate, burst int64
	total       atomic.Int64
	bad         atomic.Int64
}

func (m *meter) add(n int) {
	total := m.total.Add(int64(n))
	elapsed := time.Since(m.start)
	if total*int64(time.Second) > m.rate*int64(elapsed)+m.burst*int64(time.Second) {
		if m.bad.Add(1) == 1 {
			m.t.Errorf("%d bytes passed in %v: over rate·elapsed + burst", total, elapsed)
		}
	}
}

func (m *meter) Write(p []byte) (int, error) { m.add(len(p)); return len(p), nil }

type meteredReader struct {
	m *meter
	r io.Reader
}

func (r meteredReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.m.add(n)
	return n, err
}

// TestStressRealClock: many goroutines read and write through one limiter on the real
// clock, with random sizes and cancellations; only the upper bound is asserted.
func TestStressRealClock(t *testing.T) {
	const rate, workers = 8 << 20, 16
	m := &meter{t: t, start: time.Now(), rate: rate}
	l := mustNew(t, Options{Name: "stress", Rate: rate})
	m.burst = Options{Rate: rate}.WithDefaults().Burst
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			buf := make([]byte, 100<<10)
			for ctx.Err() == nil {
				wctx, wcancel := context.WithCancel(ctx)
				if rng.IntN(8) == 0 {
					wcancel() // some transfers are abandoned at once
				}
				var err error
				if i%2 == 0 {
					_, err = l.Writer(wctx, m).Write(buf[:1+rng.IntN(len(buf))])
				} else {
					r := l.Reader(wctx, io.LimitReader(zeros{}, int64(1+rng.IntN(len(buf)))))
					_, err = io.Copy(io.Discard, meteredReader{m, r})
				}
				wcancel()
				if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("worker %d: %v", i, err)
					return
				}
			}
		})
	}
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	g := time.NewTimer(guard)
	defer g.Stop()
	select {
	case <-joined:
	case <-g.C:
		t.Fatal("workers did not stop")
	}
	st := l.Stats()
	t.Logf("%d bytes metered in %v, %d granted, %d delayed, %d cut", m.total.Load(), time.Since(m.start), st.Bytes, st.DelayedBytes, st.Cut)
}
