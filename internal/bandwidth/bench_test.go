package bandwidth

import (
	"context"
	"io"
	"testing"
	"time"
)

// Allocation checks: after construction, a Read or Write allocates nothing, whether it
// passes at once or waits (on the real clock each wrapper reuses one timer).
func TestZeroAllocs(t *testing.T) {
	chunk := make([]byte, DefaultChunk)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"unpaced", Options{Rate: MaxRate, Burst: MaxBurst}},
		// a 16 KiB chunk costs 20 µs: every call waits
		{"paced", Options{Rate: DefaultChunk * 50_000, Burst: 2 * DefaultChunk}},
	} {
		l := mustNew(t, tc.o)
		w := l.Writer(context.Background(), io.Discard)
		if a := testing.AllocsPerRun(200, func() { _, _ = w.Write(chunk) }); a != 0 {
			t.Errorf("%s Write: %v allocs, want 0", tc.name, a)
		}
		r := l.Reader(context.Background(), zeros{})
		if a := testing.AllocsPerRun(200, func() { _, _ = r.Read(chunk) }); a != 0 {
			t.Errorf("%s Read: %v allocs, want 0", tc.name, a)
		}
	}
}

func BenchmarkReserveAt(b *testing.B) {
	l := mustNew(b, Options{Rate: MaxRate, Burst: MaxBurst, Clock: newDriver()})
	now := epoch
	b.ReportAllocs()
	b.SetBytes(DefaultChunk)
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if _, err := l.ReserveAt(now, DefaultChunk); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWrite(b *testing.B, o Options) {
	l := mustNew(b, o)
	w := l.Writer(context.Background(), io.Discard)
	p := make([]byte, DefaultChunk)
	b.ReportAllocs()
	b.SetBytes(DefaultChunk)
	for b.Loop() {
		if _, err := w.Write(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriterUnpaced measures the overhead of a Write that never waits.
func BenchmarkWriterUnpaced(b *testing.B) { benchWrite(b, Options{Rate: MaxRate, Burst: MaxBurst}) }

// BenchmarkWriterPaced writes at 1 GB/s on the real clock with a 10 ms burst: MB/s shows
// how close pacing comes to the rate despite timer slack.
func BenchmarkWriterPaced(b *testing.B) {
	benchWrite(b, Options{Rate: 1e9, Burst: 1e7, MaxDelay: time.Minute})
}

func BenchmarkReaderUnpaced(b *testing.B) {
	l := mustNew(b, Options{Rate: MaxRate, Burst: MaxBurst})
	r := l.Reader(context.Background(), zeros{})
	p := make([]byte, DefaultChunk)
	b.ReportAllocs()
	b.SetBytes(DefaultChunk)
	for b.Loop() {
		if _, err := r.Read(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriterParallel: many connections of one app contend for its limiter.
func BenchmarkWriterParallel(b *testing.B) {
	l := mustNew(b, Options{Rate: MaxRate, Burst: MaxBurst})
	b.ReportAllocs()
	b.SetBytes(DefaultChunk)
	b.RunParallel(func(pb *testing.PB) {
		w := l.Writer(context.Background(), io.Discard)
		p := make([]byte, DefaultChunk)
		for pb.Next() {
			if _, err := w.Write(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
