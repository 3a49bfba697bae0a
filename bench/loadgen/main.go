// Command loadgen is an open-loop HTTP/1.1 load generator for levee's
// overload benchmark (bench/overload.sh).
//
// It offers a constant arrival rate for a fixed duration: request i is due at
// start + i/rate whatever happened to earlier requests, and its latency is
// measured from that intended time. A request that cannot be sent at once
// because every connection is busy waits for one, and that wait counts in its
// latency; one whose whole timeout passes before a connection frees up is
// counted as a timeout ("unsent") without being sent. So the numbers do not
// suffer from coordinated omission: a stalled target cannot slow the load down
// or hide its stalls.
//
//	go build -o loadgen ./bench/loadgen
//	./loadgen -url http://127.0.0.1:18082/ -host bench.local -rate 19200 -duration 10s
//
// Connections: at most -conns keep-alive connections, one per worker, opened
// on first use and re-opened after an error or timeout (a timed-out
// connection is aborted, since its response may still arrive). The request
// deadline is intended time + -timeout, for dialing, writing and reading.
//
// Output: one JSON object on stdout (see Summary); progress on stderr.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/drill"
)

// Summary is the JSON printed at the end of a run.
type Summary struct {
	Label       string            `json:"label,omitempty"`
	URL         string            `json:"url"`
	Rate        float64           `json:"rate"`         // requested arrival rate, req/s
	DurationS   float64           `json:"duration_s"`   // schedule length
	Conns       int               `json:"conns"`        // connection pool bound
	TimeoutMS   float64           `json:"timeout_ms"`   // per request, from its intended time
	Scheduled   int64             `json:"scheduled"`    // rate * duration
	Sent        uint64            `json:"sent"`         // actually written to a connection
	OfferedRate float64           `json:"offered_rate"` // sent / duration: the rate the target really saw
	Unsent      uint64            `json:"unsent"`       // timed out waiting for a free connection, never sent
	Late        uint64            `json:"late"`         // found every connection busy at their intended time
	Completed   map[string]uint64 `json:"completed"`    // responses by status code
	OK          uint64            `json:"ok"`           // 2xx within the timeout
	Rejected    uint64            `json:"rejected"`     // non-2xx responses within the timeout
	Timeouts    uint64            `json:"timeouts"`     // sent, no full response by the deadline (unsent not included)
	Errors      uint64            `json:"errors"`       // sent, failed otherwise
	ErrorKinds  map[string]uint64 `json:"error_kinds"`  // errors by kind
	Dials       uint64            `json:"dials"`        // connections opened
	GoodputRPS  float64           `json:"goodput_rps"`  // ok / duration
	OKLatency   LatencySummary    `json:"latency_ok"`   // successful responses, from intended time
	RejLatency  LatencySummary    `json:"latency_rejected"`
	SchedLag    LatencySummary    `json:"sched_lag"` // generator wake-up lag for requests with a free connection
	ElapsedS    float64           `json:"elapsed_s"` // wall time of the whole run, drain included
	GoMaxProcs  int               `json:"gomaxprocs"`
}

func main() {
	target := flag.String("url", "http://127.0.0.1:9101/", "target URL (http only)")
	host := flag.String("host", "", "Host header (default: the URL's host)")
	rateFlag := flag.String("rate", "1000", "arrival rate in requests per second (e.g. 19200 or 19200/s)")
	duration := flag.Duration("duration", 10*time.Second, "how long to offer load (the run ends at most -timeout later)")
	conns := flag.Int("conns", 512, "maximum open connections (= workers)")
	timeout := flag.Duration("timeout", time.Second, "per-request timeout, counted from the request's intended send time")
	label := flag.String("label", "", "label copied into the JSON summary")
	quiet := flag.Bool("q", false, "no progress on stderr")
	kvFile := flag.String("kv", "", "also write the summary as one line of key=value pairs to this file (for shell scripts)")
	predial := flag.Bool("predial", true, "open all -conns connections before the schedule starts (not counted in dials)")
	flag.Parse()

	rate, err := parseRate(*rateFlag)
	if err != nil {
		fatalf("-rate: %v", err)
	}
	if *duration <= 0 || *duration > 10*time.Minute {
		fatalf("-duration must be in (0, 10m]")
	}
	if *conns < 1 || *conns > 65536 {
		fatalf("-conns must be 1..65536")
	}
	if *timeout <= 0 || *timeout > time.Minute {
		fatalf("-timeout must be in (0, 1m]")
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		fatalf("-url must be http://host:port/path (got %q)", *target)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	hostHdr := *host
	if hostHdr == "" {
		hostHdr = u.Host
	}
	path := u.RequestURI()
	req := buildRequest(path, hostHdr)

	st := &Stats{}
	var dials atomic.Uint64
	workers := make([]*conn, *conns)
	for w := range workers {
		workers[w] = newConn(addr, req, &dials)
	}
	if *predial {
		// Open every connection first, so the run measures the target under
		// load rather than a burst of connection setups at t=0.
		var pg sync.WaitGroup
		deadline := time.Now().Add(5 * time.Second)
		for _, c := range workers {
			pg.Go(func() {
				if c.dial(deadline) == nil {
					c.reused = true // idle before its first request: retry if the server closed it
				}
			})
		}
		pg.Wait()
		dials.Store(0)
	}
	start := time.Now().Add(50 * time.Millisecond) // let the workers get going
	sched := NewSchedule(start, rate, *duration)

	done := make(chan struct{})
	if !*quiet {
		go progress(st, sched, done)
	}
	var wg sync.WaitGroup
	for _, c := range workers {
		wg.Go(func() { Run(sched, realClock{}, c, *timeout, st) })
	}
	wg.Wait()
	close(done)
	elapsed := time.Since(start)
	for _, c := range workers {
		c.close(false)
	}

	sum := summarize(st, sched, *duration)
	sum.Label, sum.URL, sum.Conns = *label, *target, *conns
	sum.TimeoutMS = ms(*timeout)
	sum.Dials = dials.Load()
	sum.ElapsedS = round3(elapsed.Seconds())
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sum); err != nil {
		fatalf("%v", err)
	}
	if *kvFile != "" {
		if err := os.WriteFile(*kvFile, []byte(sum.KV()+"\n"), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

// KV is the summary as one line of space-separated key=value pairs; codes is
// "503:120,429:7" (sorted by code) or "-".
func (s Summary) KV() string {
	codes := make([]string, 0, len(s.Completed))
	for c, n := range s.Completed {
		if c[0] != '2' {
			codes = append(codes, fmt.Sprintf("%s:%d", c, n))
		}
	}
	sort.Strings(codes)
	cs := strings.Join(codes, ",")
	if cs == "" {
		cs = "-"
	}
	kinds := make([]string, 0, len(s.ErrorKinds))
	for k, n := range s.ErrorKinds {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(kinds)
	ks := strings.Join(kinds, ",")
	if ks == "" {
		ks = "-"
	}
	return fmt.Sprintf("rate=%g scheduled=%d sent=%d offered_rate=%g unsent=%d late=%d ok=%d rejected=%d timeouts=%d errors=%d "+
		"goodput_rps=%g ok_p50_ms=%g ok_p90_ms=%g ok_p99_ms=%g ok_max_ms=%g rej_p50_ms=%g rej_p99_ms=%g "+
		"lag_p50_ms=%g lag_p99_ms=%g dials=%d codes=%s error_kinds=%s",
		s.Rate, s.Scheduled, s.Sent, s.OfferedRate, s.Unsent, s.Late, s.OK, s.Rejected, s.Timeouts, s.Errors,
		s.GoodputRPS, s.OKLatency.P50, s.OKLatency.P90, s.OKLatency.P99, s.OKLatency.Max, s.RejLatency.P50, s.RejLatency.P99,
		s.SchedLag.P50, s.SchedLag.P99, s.Dials, cs, ks)
}

// summarize turns the counters into a Summary (pure: no clock, no I/O).
func summarize(st *Stats, s *Schedule, dur time.Duration) Summary {
	secs := dur.Seconds()
	sum := Summary{
		Rate:       s.Rate,
		DurationS:  round3(secs),
		Scheduled:  s.Total,
		Sent:       st.Sent.Load(),
		Unsent:     st.Unsent.Load(),
		Late:       st.Late.Load(),
		Completed:  map[string]uint64{},
		OK:         st.OK.Load(),
		Rejected:   st.Rejected.Load(),
		Timeouts:   st.Timeouts.Load(),
		Errors:     st.Errors.Load(),
		ErrorKinds: map[string]uint64{},
		OKLatency:  st.OKLat.Summary(),
		RejLatency: st.RejLat.Summary(),
		SchedLag:   st.SchedLag.Summary(),
		GoMaxProcs: gomaxprocs(),
	}
	sum.OfferedRate = round3(float64(sum.Sent) / secs)
	sum.GoodputRPS = round3(float64(sum.OK) / secs)
	for code := range st.ByStatus {
		if n := st.ByStatus[code].Load(); n > 0 {
			sum.Completed[strconv.Itoa(code)] = n
		}
	}
	for k := range st.ErrKinds {
		if n := st.ErrKinds[k].Load(); n > 0 {
			sum.ErrorKinds[errKindNames[k]] = n
		}
	}
	return sum
}

// parseRate reads "19200", "19200/s", "1.5k/s" or "600/m" as requests per second.
var parseRate = drill.ParseRate

func progress(st *Stats, s *Schedule, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-done:
			return
		case <-t.C:
			sent := st.Sent.Load()
			fmt.Fprintf(os.Stderr, "loadgen: sent %d/s (target %.0f/s), ok %d, rejected %d, timeouts %d+%d unsent, errors %d\n",
				sent-last, s.Rate, st.OK.Load(), st.Rejected.Load(), st.Timeouts.Load(), st.Unsent.Load(), st.Errors.Load())
			last = sent
		}
	}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", a...)
	os.Exit(2)
}
