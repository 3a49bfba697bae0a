package observe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// blockedWriter is an output no one reads: Write blocks until release.
type blockedWriter struct{ release chan struct{} }

func (b blockedWriter) Write(p []byte) (int, error) {
	<-b.release
	return len(p), nil
}

func TestLogWriterNeverBlocksOnABlockedOutput(t *testing.T) {
	leaktest.Check(t)
	out := blockedWriter{release: make(chan struct{})}
	w := NewLogWriter(out, LogWriterLimits{Lines: 16, Bytes: 1 << 20, MaxLine: 1024})
	w.Start()
	log := slog.New(slog.NewJSONHandler(w, nil))
	const writers, each = 32, 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				for range each {
					log.Error("backend unreachable", "app", "a")
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("loggers blocked behind an output that blocks")
	}
	// At most the queue and what the drain's buffer took before its
	// Write blocked (64 KiB of lines of more than 50 bytes) got past.
	defer close(out.release)
	if got := writers*each - int(w.Dropped()); got > 16+(64<<10)/50 {
		t.Fatalf("%d of %d lines not dropped; want at most the queue's 16 and the drain's buffer", got, writers*each)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close on a blocked output = %v; want the deadline's error", err)
	}
}

func TestLogWriterWritesEveryLineAndFlushesOnClose(t *testing.T) {
	leaktest.Check(t)
	var buf bytes.Buffer
	w := NewLogWriter(&buf, LogWriterLimits{Lines: 1000, Bytes: 1 << 20, MaxLine: 64})
	w.Start()
	for range 100 {
		w.Write([]byte("a line\n"))
	}
	w.Write([]byte(strings.Repeat("x", 100) + "\n"))
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	if n := strings.Count(got, "a line\n"); n != 100 || w.Dropped() != 0 {
		t.Fatalf("wrote %d of 100 lines, dropped %d", n, w.Dropped())
	}
	if !strings.HasSuffix(got, strings.Repeat("x", 63)+"...\n") {
		t.Fatalf("a long line was not cut at MaxLine with its newline kept: %q", got[len(got)-80:])
	}
	w.Write([]byte("late\n"))
	if w.Dropped() != 1 || strings.Contains(buf.String(), "late") {
		t.Fatal("a line written after Close was not dropped and counted")
	}
}

func TestLogWriterBoundsQueuedBytes(t *testing.T) {
	w := NewLogWriter(blockedWriter{}, LogWriterLimits{Lines: 1000, Bytes: 100, MaxLine: 1000})
	for range 10 {
		w.Write([]byte(strings.Repeat("y", 39) + "\n")) // not started: nothing drains
	}
	if got := w.Dropped(); got != 8 {
		t.Fatalf("dropped %d of 10 lines of 40 bytes with room for 100; want 8", got)
	}
}

func TestAccessSampleRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ratio := range []float64{0.01, 0.1, 0.5} {
		s := NewAccessSample(ratio)
		const n = 200_000
		var got int
		for range n {
			if s.Pick(r.Uint64()) {
				got++
			}
		}
		if want := ratio * n; float64(got) < want*0.9 || float64(got) > want*1.1 {
			t.Errorf("ratio %v: %d of %d sampled; want about %v", ratio, got, n, want)
		}
	}
	if NewAccessSample(0).Take() || !NewAccessSample(1).Take() || (AccessSample{}).Take() {
		t.Error("0 and the zero value must log nothing, 1 everything")
	}
	s := NewAccessSample(0.01)
	if a := testing.AllocsPerRun(1000, func() { s.Take() }); a != 0 {
		t.Errorf("Take allocates %v times; want 0", a)
	}
}

func TestAccessLogLineIsJSON(t *testing.T) {
	var buf bytes.Buffer
	a := NewAccessLog(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	a.Write(AccessRecord{Time: time.Unix(1700000000, 0).UTC(), App: "a", Method: "GET", Host: "a.test", Path: `/x"y`,
		Status: 429, Duration: 1500 * time.Microsecond, Remote: "1.2.3.4:5", Bytes: 120, Reject: "rate"})
	want := `{"time":"2023-11-14T22:13:20Z","level":"INFO","msg":"access","app":"a","method":"GET","host":"a.test","path":"/x\"y","status":429,"duration_ms":1.5,"remote":"1.2.3.4:5","bytes":120,"reject":"rate"}` + "\n"
	if buf.String() != want {
		t.Fatalf("line\n%s\nwant\n%s", buf.String(), want)
	}
}
