package bandwidth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// boundWriter records what passes and checks, at every write, that the bytes so far are
// ≤ rate·(now − epoch) + burst on the fake clock.
type boundWriter struct {
	t            *testing.T
	d            *driver
	rate, burst  int64
	mu           *sync.Mutex // shared by the writers of one limiter; guards the fields below
	total        *int64
	own          int64
	first, final time.Time
}

// written reports the bytes this writer has passed; the test driver calls it while the
// worker may be writing.
func (w *boundWriter) written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.own
}

func (w *boundWriter) Write(p []byte) (int, error) {
	now := w.d.Now()
	w.mu.Lock()
	*w.total += int64(len(p))
	total := *w.total
	if w.own == 0 {
		w.first = now
	}
	w.own += int64(len(p))
	w.final = now
	w.mu.Unlock()
	if total*int64(time.Second) > w.rate*int64(now.Sub(epoch))+w.burst*int64(time.Second) {
		w.t.Errorf("%d bytes passed by %v: over rate·t + burst", total, now.Sub(epoch))
	}
	return len(p), nil
}

// TestWriterLongTransfer: 32 MiB through a Writer at 1 MiB/s takes (32 MiB − burst)/rate
// within 1%, and never passes the bound.
func TestWriterLongTransfer(t *testing.T) {
	const rate = 1 << 20
	d := newDriver()
	l := mustNew(t, Options{Name: "shop", Rate: rate, Clock: d})
	burst := Options{Rate: rate}.WithDefaults().Burst
	var mu sync.Mutex
	var total int64
	bw := &boundWriter{t: t, d: d, rate: rate, burst: burst, mu: &mu, total: &total}
	done := make(chan string, 1)
	const size = 32 << 20
	go func() {
		w := l.Writer(context.Background(), bw)
		buf := make([]byte, 100_000) // not a multiple of the chunk
		for sent := 0; sent < size; {
			n, err := w.Write(buf[:min(len(buf), size-sent)])
			sent += n
			if err != nil {
				t.Error(err)
				break
			}
		}
		done <- "w"
	}()
	d.run(t, done, 1, func(string) int { return 0 })
	if total != size {
		t.Fatalf("wrote %d bytes, want %d", total, size)
	}
	elapsed := d.Now().Sub(epoch).Seconds()
	want := float64(size-burst) / rate
	if elapsed < want*0.9999 || elapsed > want*1.01 {
		t.Fatalf("transfer took %.4fs, want %.4fs within 1%%", elapsed, want)
	}
	if st := l.Stats(); st.Bytes != size || st.Cut != 0 || st.DelayedBytes < size-burst {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestFairShare: a huge transfer is running when a small one starts; the small one gets
// half the rate and finishes within its fair share of time, not after the huge one.
func TestFairShare(t *testing.T) {
	const rate = 1 << 20
	const small = 256 << 10
	d := newDriver()
	l := mustNew(t, Options{Name: "shop", Rate: rate, Clock: d})
	burst := Options{Rate: rate}.WithDefaults().Burst
	var mu sync.Mutex
	var total int64
	hugeW := &boundWriter{t: t, d: d, rate: rate, burst: burst, mu: &mu, total: &total}
	smallW := &boundWriter{t: t, d: d, rate: rate, burst: burst, mu: &mu, total: &total}
	done := make(chan string, 2)
	hugeCtx, stopHuge := context.WithCancel(context.Background())
	defer stopHuge()
	go func() {
		_, err := io.Copy(l.Writer(hugeCtx, hugeW), io.LimitReader(zeros{}, 1<<30))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("huge transfer ended with %v, want context.Canceled", err)
		}
		done <- "huge"
	}()
	var start time.Time
	var hugeAtStart int64
	d.run(t, done, 1, func(finished string) int {
		switch {
		case finished == "small":
			stopHuge()
		case start.IsZero() && d.Now().Sub(epoch) >= time.Second:
			start, hugeAtStart = d.Now(), hugeW.written()
			go func() {
				if _, err := l.Writer(context.Background(), smallW).Write(make([]byte, small)); err != nil {
					t.Error(err)
				}
				done <- "small"
			}()
			return 1
		}
		return 0
	})
	took := smallW.final.Sub(start)
	chunkTime := time.Duration(cost(int64(l.Chunk()), rate))
	fair := time.Duration(cost(2*small, rate)) // half the rate
	if took > fair+2*chunkTime {
		t.Fatalf("small transfer took %v, over its fair share %v (+2 chunks)", took, fair)
	}
	hugeDuring := hugeW.own - hugeAtStart
	if hugeDuring < small-2*int64(l.Chunk()) || hugeDuring > small+2*int64(l.Chunk()) {
		t.Fatalf("huge transfer moved %d bytes while the small one moved %d: not an even split", hugeDuring, small)
	}
	t.Logf("small: %d bytes in %v (fair share %v); huge moved %d meanwhile", small, took, fair, hugeDuring)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestReaderPacesAfterRead: reads return at most a chunk, are charged only for what was
// read, keep the bound, and pass EOF through; io.Copy cannot bypass the pacing.
func TestReaderPacesAfterRead(t *testing.T) {
	const rate = 1 << 20
	d := newDriver()
	l := mustNew(t, Options{Name: "shop", Rate: rate, Clock: d})
	burst := Options{Rate: rate}.WithDefaults().Burst
	var mu sync.Mutex
	var total int64
	bw := &boundWriter{t: t, d: d, rate: rate, burst: burst, mu: &mu, total: &total}
	src := bytes.Repeat([]byte("levee"), 200_000) // 1,000,000 bytes
	done := make(chan string, 1)
	go func() {
		r := l.Reader(context.Background(), bytes.NewReader(src))
		p := make([]byte, 64<<10)
		if n, _ := r.Read(p); n != l.Chunk() {
			t.Errorf("Read(64 KiB) = %d, want one chunk %d", n, l.Chunk())
		}
		if _, err := io.Copy(bw, r); err != nil { // *bytes.Reader is a WriterTo
			t.Error(err)
		}
		done <- "r"
	}()
	d.run(t, done, 1, func(string) int { return 0 })
	if want := int64(len(src) - l.Chunk()); total != want {
		t.Fatalf("copied %d bytes, want %d", total, want)
	}
	if st := l.Stats(); st.Bytes != int64(len(src)) {
		t.Fatalf("charged %d bytes, want %d", st.Bytes, len(src))
	}
	if want := time.Duration(cost(int64(len(src))-burst, rate)); d.Now().Sub(epoch) < want {
		t.Fatalf("finished at %v, before %v", d.Now().Sub(epoch), want)
	}
}

func TestReaderCutDropsBytes(t *testing.T) {
	l, d := slowLimiter(t)
	for range 9 {
		_, _ = l.ReserveAt(d.Now(), l.Chunk())
	}
	n, err := l.Reader(context.Background(), bytes.NewReader(make([]byte, 100))).Read(make([]byte, 100))
	if n != 0 || !errors.Is(err, ErrTooSlow) {
		t.Fatalf("Read = %d, %v; want 0, ErrTooSlow", n, err)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

func TestWriterShortWrite(t *testing.T) {
	l := mustNew(t, Options{Rate: 1 << 20, Clock: newDriver()})
	if n, err := l.Writer(context.Background(), shortWriter{}).Write(make([]byte, 10)); n != 5 || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write = %d, %v; want 5, io.ErrShortWrite", n, err)
	}
}
