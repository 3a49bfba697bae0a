package drill

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDoerCPU measures what the generator itself costs per request:
// this process's CPU time (user and system) over an open-loop stream of
// b.N requests at DRILL_BENCH_RATE per second (2,000 by default), one in
// DRILL_BENCH_FRESH_EVERY (the upgrade drill's, by default) on a fresh
// connection, to DRILL_BENCH_TARGET: an edge in another process (nginx
// answering 4 KiB, say), so that none of its CPU is counted here.
//
//	DRILL_BENCH_TARGET=http://127.0.0.1:8089 go test -run - -bench DoerCPU -benchtime 20000x ./internal/drill
func BenchmarkDoerCPU(b *testing.B) {
	target := os.Getenv("DRILL_BENCH_TARGET")
	if target == "" {
		b.Skip("set DRILL_BENCH_TARGET to an edge in another process")
	}
	rate := 2000.0
	if r, err := strconv.ParseFloat(os.Getenv("DRILL_BENCH_RATE"), 64); err == nil && r > 0 {
		rate = r
	}
	freshEvery := int64(upgradeFreshEvery)
	if n, err := strconv.ParseInt(os.Getenv("DRILL_BENCH_FRESH_EVERY"), 10, 64); err == nil && n > 0 {
		freshEvery = n
	}
	for _, c := range []struct {
		name string
		mk   func() closingDoer
	}{
		{"net/http", func() closingDoer { return NewHTTPDoer(target, 4096) }},
		{"raw", func() closingDoer {
			d, err := NewRawDoer(target, 4096)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := c.mk()
			defer d.Close()
			sched, err := Constant(rate, time.Duration(float64(b.N)/rate*float64(time.Second)), int64(b.N))
			if err != nil {
				b.Fatal(err)
			}
			before := cpuTime(b)
			b.ResetTimer()
			res := Run(context.Background(), nil, Plan{Name: c.name, Schedule: sched, MaxInFlight: 4096,
				Timeout: 10 * time.Second, Make: mixed(freshEvery, get("a.test", "/", 1000))}, d, nil)
			b.StopTimer()
			cpu := cpuTime(b) - before
			b.ReportMetric(float64(cpu.Microseconds())/float64(max(res.Sent, 1)), "cpu-µs/req")
			b.ReportMetric(float64(res.Overflow), "overflow")
			b.ReportMetric(float64(res.Errors+res.Timeouts), "failed")
			b.ReportMetric(float64(res.Sent)/res.Elapsed.Seconds(), "req/s")
		})
	}
}

// cpuTime is this process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
