package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/observe"
	"github.com/valyala/fasthttp"
)

// floodConfig is one app in front of a closed port, every call a real dial
// that fails (ejection off, so no call is answered no-backend instead), with
// the error log's budgets small and its interval short, to cross many.
func floodConfig(dead, access string) string {
	return fmt.Sprintf(`
log: {errors_per_second: 10, errors_per_event: 5, errors_interval: 1s, access: %s}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    ejection: {max_ejected: 0%%}
    limits: {concurrency: 1024}
`, access, dead)
}

// lineSink counts the lines written to it by kind.
type lineSink struct {
	mu                     sync.Mutex
	access, errors, others int
	summaries              int // summary lines, among errors
	summed                 int // the counts of the summaries
}

var summaryCount = regexp.MustCompile(`"msg":"suppressed (\d+) similar"`)

func (s *lineSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, line := range bytes.Split(bytes.TrimSuffix(p, []byte("\n")), []byte("\n")) {
		switch m := summaryCount.FindSubmatch(line); {
		case bytes.Contains(line, []byte(`"msg":"access"`)):
			s.access++
		case bytes.Contains(line, []byte(`"msg":"backend unreachable"`)):
			s.errors++
		case m != nil:
			n, _ := strconv.Atoi(string(m[1]))
			s.summed += n
			s.summaries++
			s.errors++
		default:
			s.others++
		}
	}
	return len(p), nil
}

// peaks samples goroutines and OS threads until stop, keeping the largest.
type peaks struct {
	goroutines, threads atomic.Int64
	stop, done          chan struct{}
}

func watchPeaks() *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			p.goroutines.Store(max(p.goroutines.Load(), int64(runtime.NumGoroutine())))
			p.threads.Store(max(p.threads.Load(), int64(osThreads())))
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peaks) end() { close(p.stop); <-p.done }

// osThreads counts this process's OS threads (0 where /proc is missing).
func osThreads() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	return len(ents)
}

// flood makes n failing calls through s's fasthttp handler from workers
// goroutines, each with its own request; it returns how many got a 502.
func flood(s *Server, n, workers int) int64 {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}, nil)
			for next.Add(1) <= int64(n) {
				fastRequest(&ctx, "a.test")
				s.serveFast(&ctx)
				if ctx.Response.StatusCode() == http.StatusBadGateway {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// TestFailureFloodLogsAreBounded is the outage that logging once amplified:
// calls to a backend that refuses every connection; 20,000 here, enough to
// cross several log intervals under -race, and a million in
// TestFailureFloodOfAMillionLogsAreBounded (built without -race). They go
// through the fasthttp handler in process (serveFast: the whole request
// path, the real dial, the real logging), not through a client over
// loopback: in process a million take ~13 s on two shared cores (75k/s),
// while a client's million would take about a minute, most of it the
// client's. TestProxiedFailureFloodLogsAreBounded is the real flood, smaller.
// The lines written must stay within the budgets, the summaries must
// account for every failure, and goroutines and OS threads stay flat.
func TestFailureFloodLogsAreBounded(t *testing.T) { testFailureFlood(t, 20_000) }

func testFailureFlood(t *testing.T, floodCalls int) {
	skipOnH2C(t, "it drives the fasthttp handler in process; TestProxiedFailureFloodLogsAreBounded runs on both")
	sink := &lineSink{}
	out := observe.NewLogWriter(sink, observe.DefaultLogWriterLimits)
	out.Start()
	handler := slog.NewJSONHandler(out, nil)
	s := New(mustParse(t, floodConfig(deadAddr(t), "{sample: 0.001}")), Options{Logger: slog.New(handler),
		LogOutput: out})
	const workers = 32
	goroutines, threads := runtime.NumGoroutine(), osThreads()
	p := watchPeaks()
	start := time.Now()
	failed := flood(s, floodCalls, workers)
	elapsed := time.Since(start)
	p.end()
	s.errlog.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := out.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d failing calls in %v (%.0f/s): %d error lines (%d suppressed, summed), %d access lines; "+
		"goroutines %d -> peak %d, threads %d -> peak %d, log lines dropped %d",
		floodCalls, elapsed.Round(time.Millisecond), float64(floodCalls)/elapsed.Seconds(), sink.errors, sink.summed,
		sink.access, goroutines, p.goroutines.Load(), threads, p.threads.Load(), out.Dropped())

	if failed != int64(floodCalls) {
		t.Fatalf("%d of %d calls got 502; want every one a failed upstream call", failed, floodCalls)
	}
	// One key: its budget and its summary per interval started, and never
	// more than errors_per_second (and one merged summary) per second.
	intervals := int(elapsed/time.Second) + 2
	if bound := (5 + 1) * intervals; sink.errors > bound {
		t.Fatalf("%d error lines in %v; want at most %d (5 + a summary per 1s interval)", sink.errors, elapsed, bound)
	}
	if logged := sink.errors - sink.summaries; logged+sink.summed != floodCalls {
		t.Fatalf("%d lines written + %d summed = %d; want every one of %d failures accounted for",
			logged, sink.summed, logged+sink.summed, floodCalls)
	}
	if got := metricValue(t, s, "levee_log_lines_suppressed_total"); got != float64(sink.summed) {
		t.Fatalf("levee_log_lines_suppressed_total = %v; want the summaries' %d", got, sink.summed)
	}
	// The sampled count is binomial (mean want, deviation about its
	// square root): the bounds are 4 deviations out, which a sampler that
	// works leaves about once in 5,000 runs at 20,000 calls. want/2 was
	// crossed about once in 200.
	if want := floodCalls / 1000; absDiff(sink.access, want) > 4*int(math.Sqrt(float64(want)))+1 {
		t.Fatalf("%d access lines at sample 0.001 of %d; want about %d", sink.access, floodCalls, want)
	}
	if out.Dropped() != 0 {
		t.Fatalf("%d lines dropped by a sink that keeps up", out.Dropped())
	}
	checkPeaks(t, p, goroutines+workers, threads)
}

// TestProxiedFailureFloodLogsAreBounded is the flood from real clients over
// loopback, through a listener, on each engine.
func TestProxiedFailureFloodLogsAreBounded(t *testing.T) {
	pr := startProxy(t, floodConfig(deadAddr(t), "false"))
	const clients = 16
	tr := http.DefaultTransport.(*http.Transport).Clone() // h2c in the h2c run
	tr.MaxIdleConnsPerHost = clients
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()
	goroutines, threads := runtime.NumGoroutine(), osThreads()
	p := watchPeaks()
	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= floodProxied {
				req, _ := http.NewRequest(http.MethodGet, pr.URL+"/", nil)
				req.Host = "a.test"
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				readAll(t, resp)
				if resp.StatusCode == http.StatusBadGateway {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	p.end()
	pr.srv.errlog.Flush()
	logs := pr.logs.String()
	lines := bytes.Count([]byte(logs), []byte("backend unreachable"))
	var summed int
	for _, m := range regexp.MustCompile(`msg="suppressed (\d+) similar"`).FindAllStringSubmatch(logs, -1) {
		n, _ := strconv.Atoi(m[1])
		summed += n
	}
	t.Logf("%d proxied failing requests in %v: %d lines naming the event, %d summed; goroutines %d -> peak %d, threads %d -> peak %d",
		floodProxied, elapsed.Round(time.Millisecond), lines, summed, goroutines, p.goroutines.Load(), threads, p.threads.Load())
	if failed.Load() != floodProxied {
		t.Fatalf("%d of %d requests got 502", failed.Load(), floodProxied)
	}
	// Each summary's line names the event too.
	if bound := (5 + 1) * (int(elapsed/time.Second) + 2); lines > bound {
		t.Fatalf("%d lines in %v; want at most %d", lines, elapsed, bound)
	}
	if summaries := lines - (floodProxied - summed); summaries < 0 || summaries > lines {
		t.Fatalf("%d lines and %d summed do not account for %d failures", lines, summed, floodProxied)
	}
	// Per client connection: its transport's two goroutines, levee's one
	// or two (HTTP/2: one per stream), the request's.
	checkPeaks(t, p, goroutines+6*clients, threads)
}

// metricValue is the value of s's metric name without labels.
func metricValue(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	mfs, err := s.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// checkPeaks fails t if goroutines rose past wantG plus a margin (timers,
// the sampler), or OS threads by more than a few: a blocked write per
// failure would add one each.
func checkPeaks(t *testing.T, p *peaks, wantG, threads int) {
	t.Helper()
	if g := p.goroutines.Load(); g > int64(wantG+16) {
		t.Errorf("goroutines peaked at %d; want at most %d", g, wantG+16)
	}
	if th := p.threads.Load(); threads > 0 && th > int64(threads+8) {
		t.Errorf("OS threads peaked at %d from %d; want at most 8 more", th, threads)
	}
}

// blockedOutput is a stderr no one reads: every Write blocks until release.
type blockedOutput struct{ release chan struct{} }

func (b blockedOutput) Write(p []byte) (int, error) {
	<-b.release
	return len(p), nil
}

// TestBlockedLogOutputDoesNotStallRequests: with the log's output blocked
// for good, and a line for every request (access log on, errors), requests
// go on at full speed; their lines are dropped and counted.
func TestBlockedLogOutputDoesNotStallRequests(t *testing.T) {
	skipOnH2C(t, "it drives the fasthttp handler in process")
	blocked := blockedOutput{release: make(chan struct{})}
	defer close(blocked.release) // the writer's goroutine ends with the test
	out := observe.NewLogWriter(blocked, observe.LogWriterLimits{Lines: 64, Bytes: 64 << 10, MaxLine: 4096})
	out.Start()
	handler := slog.NewJSONHandler(out, nil)
	s := New(mustParse(t, floodConfig(deadAddr(t), "true")), Options{Logger: slog.New(handler),
		LogOutput: out})
	const workers, calls = 32, 20_000
	goroutines, threads := runtime.NumGoroutine(), osThreads()
	p := watchPeaks()
	done := make(chan int64, 1)
	go func() { done <- flood(s, calls, workers) }()
	select {
	case failed := <-done:
		if failed != calls {
			t.Fatalf("%d of %d calls got 502", failed, calls)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("requests stalled behind a blocked log output")
	}
	p.end()
	if got := metricValue(t, s, "levee_log_dropped_total"); got < calls-64-(64<<10)/100 {
		t.Fatalf("levee_log_dropped_total = %v; want about every one of %d access lines", got, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := out.Close(ctx); err == nil {
		t.Fatal("Close flushed to an output that blocks")
	}
	checkPeaks(t, p, goroutines+workers, threads)
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}
