package drill

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

var upgradeDrill = &Drill{
	Name: "upgrade",
	Incident: "Reloading or upgrading the edge refused new connections while its listener was closed, cut the " +
		"responses it was sending, or started its rate buckets full: every deploy was an outage for some " +
		"clients and a burst for the backends.",
	Applies: func(o Options) (bool, string) {
		return need("--command", o.Command != "", "--host", o.Host != "",
			"--limit with --limit-host", o.LimitHost == "" || o.Limit > 0)
	},
	run: runUpgrade,
}

// UpgradeSnippet is the levee config that routes host (and limitHost,
// limited to limit per second, when given) to the upgrade drill's backend;
// concurrency > 0 limits host's app to that many requests in flight.
func UpgradeSnippet(host, limitHost string, b *Backend, limit float64, concurrency int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "apps:\n  upgrade:\n    hosts: [%s]\n    backends: [%s]\n", host, b.Addr)
	if concurrency > 0 {
		fmt.Fprintf(&s, "    limits: {concurrency: %d}\n", concurrency)
	}
	if limitHost != "" {
		fmt.Fprintf(&s, "  upgrade-limited:\n    hosts: [%s]\n    backends: [%s]\n    limits: {rate: %s/s}\n",
			limitHost, b.Addr, strconv.FormatFloat(limit, 'g', -1, 64))
	}
	return s.String()
}

// commandRun is one run of the reload or upgrade command.
type commandRun struct {
	Start, End time.Duration // on the meter's time base
	Err        error
	Output     string // the end of what it printed
}

// window is a span of the meter's time base around one run. It opens
// when the answer to a refusal of the limited host came (From): the
// bucket was empty when that refusal was decided, at Sent or later, so
// from then to To a GCRA limit admits at most (To - Sent) x limit + 1.
// Without a refusal before it (not Anchored), it opens at its nominal
// start, and the bound does not hold.
type window struct {
	Run            int // 1-based
	Sent, From, To time.Duration
	Anchored       bool
}

// span is the window's length as its allowance counts it.
func (w window) span() time.Duration { return w.To - w.Sent }

// upgradeLoad is what the upgrade drill measured, for gradeUpgrade.
type upgradeLoad struct {
	Runs     []commandRun
	Streams  []*Result         // the host's stream, its HTTP/2 stream (if any), then the limited host's (if any)
	Admitted []int64           // arrivals at the backend for the limited host, per window
	Windows  []window          // one per run
	Peak     int64             // most requests to the host in flight at the backend at once
	Failures map[string]int    // failures by kind and phase: "refused/run 2" -> n
	First    map[string]string // the first error of each kind
	RanOut   bool              // a stream reached --max-requests before the runs ended
	Dropped  int64             // arrivals past the meter's bound, not counted in windows
	H2       *h2Tally          // the HTTP/2 stream's connections, with --h2-target
}

// runUpgrade starts the backend, waits for the edge to route to it, then
// drives the load while it runs the command Runs times, Settle apart, with
// Settle of load before the first run and after the last.
func runUpgrade(ctx context.Context, o Options, r *Report) error {
	if need := o.UpgradeRate * (o.Settle * time.Duration(o.Runs+1)).Seconds(); need > float64(o.MaxRequests) {
		return fmt.Errorf("--max-requests %d is below the %.0f requests the load needs at least "+
			"(--upgrade-rate x --settle x (--runs + 1))", o.MaxRequests, need)
	}
	hosts := []string{o.Host}
	if o.LimitHost != "" {
		hosts = append(hosts, o.LimitHost)
	}
	m := newMeter(o.Clock, o.UpgradeHold, hosts...)
	b, err := startBackend("upgrade", o.UpgradePort, nil, m)
	if err != nil {
		return fmt.Errorf("drill: backend: %w", err)
	}
	bs := []*Backend{b}
	defer CloseBackends(bs)
	lead := fmt.Sprintf("upgrade: a backend that answers %d bytes after %v listens on %s; point the edge at it",
		o.UpgradeBody, o.UpgradeHold, b.Addr)
	if err := pointEdge(ctx, o, lead, o.Host, UpgradeSnippet(o.Host, o.LimitHost, b, o.Limit, o.Concurrency), bs); err != nil {
		return err
	}
	if o.LimitHost != "" {
		probe := NewHTTPDoer(o.Target, 1)
		err := waitRouted(ctx, probe, o.LimitHost, bs, o.RouteWait)
		probe.Close()
		if err != nil {
			return err
		}
	}
	h2Roots, err := pemRoots("--h2-ca", o.H2CA)
	if err != nil {
		return err
	}
	up := driveUpgrade(ctx, o, m, h2Roots)
	r.add(up.Streams...)
	r.Checks = gradeUpgrade(o, up)
	r.Notes = append(r.Notes, upgradeNotes(o, up)...)
	r.ratio("answered normally or limited", answeredShare(up.Streams))
	if o.LimitHost != "" {
		r.ratio("admitted over limit, worst window", worstExcess(o, up))
	}
	if o.Concurrency > 0 {
		r.ratio("backend in flight peak/concurrency", float64(up.Peak)/float64(o.Concurrency))
	}
	if up.H2 != nil && len(up.Runs) > 0 {
		r.ratio("runs with an HTTP/2 GOAWAY", float64(runsWithGoAway(up.H2))/float64(len(up.Runs)))
	}
	if up.RanOut {
		return fmt.Errorf("the load reached --max-requests %d before the last run ended: raise it", o.MaxRequests)
	}
	return nil
}

// driveUpgrade runs the streams and the command, and collects what the
// backend saw.
func driveUpgrade(ctx context.Context, o Options, m *meter, h2Roots *x509.CertPool) *upgradeLoad {
	up := &upgradeLoad{Failures: map[string]int{}, First: map[string]string{}}
	stop := make(chan struct{})
	// The schedules are long enough for every run to take its whole
	// timeout; Stop ends them when the last run has settled.
	span := o.Settle*time.Duration(o.Runs+1) + time.Duration(o.Runs)*o.CommandTimeout
	path := o.Path + "?bytes=" + strconv.FormatInt(o.UpgradeBody, 10)
	if strings.Contains(o.Path, "?") {
		path = o.Path + "&bytes=" + strconv.FormatInt(o.UpgradeBody, 10)
	}
	h1 := func() closingDoer { return h1Doer(o) }
	plans := []Plan{{Name: "upgrade " + o.Host, Schedule: constant(o.UpgradeRate, span, o.MaxRequests),
		Make: mixed(upgradeFreshEvery, get(o.Host, path, o.Clients))}}
	doers := []func() closingDoer{h1}
	var h2w *h2Watch
	if o.H2Target != "" {
		h2w = &h2Watch{since: m.since}
		plans = append(plans, Plan{Name: "h2 " + o.Host, Schedule: constant(o.H2Rate, span, o.MaxRequests),
			Make: get(o.Host, path, o.Clients)})
		doers = append(doers, func() closingDoer { return newH2Doer(o.H2Target, hostOnly(o.Host), h2Roots, h2w) })
	}
	if o.LimitHost != "" { // last: its refusals anchor the windows
		plans = append(plans, Plan{Name: fmt.Sprintf("%gx limit %s", o.LimitOffered, o.LimitHost),
			Schedule: constant(o.LimitOffered*o.Limit, span, o.MaxRequests), Make: mixed(upgradeFreshEvery, get(o.LimitHost, path, o.Clients))})
		doers = append(doers, h1)
	}
	logs := make([]*failureLog, len(plans))
	up.Streams = make([]*Result, len(plans))
	var fns []func()
	for i := range plans {
		p := &plans[i]
		p.MaxInFlight, p.Timeout, p.Stop = o.MaxInFlight, o.Timeout, stop
		logs[i] = &failureLog{since: m.since}
		fns = append(fns, func() {
			d := doers[i]()
			defer d.Close()
			logs[i].Doer = d
			up.Streams[i] = Run(ctx, o.Clock, *p, logs[i], o.Live)
		})
	}
	streamsDone := make(chan struct{})
	go func() { defer close(streamsDone); parallel(fns...) }()
	began := m.since()
	up.Runs = runCommands(ctx, o, m.since)
	ran := m.since() - began
	close(stop)
	<-streamsDone

	for _, s := range up.Streams {
		// Every request due was dispatched: the schedule ran out before Stop.
		up.RanOut = up.RanOut || (ctx.Err() == nil && s.Sent+s.Overflow >= s.Scheduled)
		// The schedule was long enough for every run's timeout; what was
		// offered is what came due before Stop, over the time it ran.
		s.Scheduled, s.Planned, s.Window = min(s.Scheduled, s.Sent+s.Overflow), ran, min(s.Window, ran)
	}
	for _, l := range logs {
		for _, f := range l.failures() {
			up.Failures[f.kind+"/"+phase(up.Runs, f.at)]++
		}
		l.mu.Lock()
		for k, e := range l.first {
			if _, ok := up.First[k]; !ok {
				up.First[k] = e
			}
		}
		l.mu.Unlock()
	}
	if hm := m.host(o.Host); hm != nil {
		up.Peak = hm.peak.Load()
	}
	if h2w != nil {
		t := h2w.tally(up.Runs)
		up.H2 = &t
	}
	if hm := m.host(o.LimitHost); o.LimitHost != "" && hm != nil {
		at := hm.arrivals()
		hm.mu.Lock()
		up.Dropped = hm.dropped
		hm.mu.Unlock()
		refusals := logs[len(logs)-1].refusals()
		for i, run := range up.Runs {
			w := window{Run: i + 1, From: max(run.Start-o.Settle/2, 0), To: run.End + o.Settle/2}
			w.Sent = w.From
			// the last refusal answered before the nominal start
			k := sort.Search(len(refusals), func(j int) bool { return refusals[j].got > w.From })
			if k > 0 {
				w.Sent, w.From, w.Anchored = refusals[k-1].sent, refusals[k-1].got, true
			}
			up.Windows = append(up.Windows, w)
			up.Admitted = append(up.Admitted, countBetween(at, w.From, w.To))
		}
	}
	return up
}

// closingDoer is a doer with connections to close once its stream ends.
type closingDoer interface {
	Doer
	Close()
}

// h1Doer is the doer of an HTTP/1.1 stream: the raw client, whose cost
// per request leaves the edge the cores (net/http's with GoClient, or
// for an https:// target).
func h1Doer(o Options) closingDoer {
	if !o.GoClient {
		if d, err := NewRawDoer(o.Target, o.MaxInFlight); err == nil {
			return d
		}
	}
	return NewHTTPDoer(o.Target, o.MaxInFlight)
}

// upgradeFreshEvery: the upgrade drill sends every 4th request on a
// fresh connection. A quarter is a real share of clients that connect
// during a reload, and it costs less than half did: at 5,000/s the raw
// client spent 97 µs of CPU per request with half fresh, 70 with a
// quarter, 54 with none (BenchmarkDoerCPU against nginx), and each
// fresh connection costs the edge and the kernel an accept, a close
// and a TIME_WAIT besides.
const upgradeFreshEvery = 4

// mixed sends every freshEvery-th request on a fresh connection and the
// others on kept-alive ones: a reload must keep both kinds of client
// whole, those that hold a connection across it and those that connect
// during it.
func mixed(freshEvery int64, mk func(i int64) Request) func(i int64) Request {
	return func(i int64) Request {
		r := mk(i)
		r.Fresh = i%freshEvery == freshEvery-1
		return r
	}
}

// maxOutput bounds what is kept of a run's output.
const maxOutput = 2 << 10

// runCommands waits Settle, then runs the command up to Runs times with
// Settle after each; it stops at the first run that fails.
func runCommands(ctx context.Context, o Options, since func() time.Duration) []commandRun {
	var runs []commandRun
	if !sleepCtx(ctx, o.Clock, o.Settle, nil) {
		return nil
	}
	for range o.Runs {
		run := runCommand(ctx, o, since)
		runs = append(runs, run)
		if !sleepCtx(ctx, o.Clock, o.Settle, nil) || run.Err != nil {
			break
		}
	}
	return runs
}

// runCommand runs o.Command with sh -c, bounded by CommandTimeout. Its
// output goes to a file, not a pipe: a daemon it starts may keep a pipe
// open long after the command itself has exited.
func runCommand(ctx context.Context, o Options, since func() time.Duration) commandRun {
	out, err := os.CreateTemp("", "levee-drill-upgrade-*.out")
	if err != nil {
		return commandRun{Start: since(), End: since(), Err: err}
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cctx, cancel := context.WithTimeout(ctx, o.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "/bin/sh", "-c", o.Command)
	cmd.Stdout, cmd.Stderr = out, out
	run := commandRun{Start: since()}
	run.Err = cmd.Run()
	run.End = since()
	if cctx.Err() == context.DeadlineExceeded {
		run.Err = fmt.Errorf("did not exit within --command-timeout %v", o.CommandTimeout)
	}
	if fi, err := out.Stat(); err == nil {
		off := max(fi.Size()-maxOutput, 0)
		b, _ := io.ReadAll(io.NewSectionReader(out, off, maxOutput))
		run.Output = strings.TrimSpace(string(b))
	}
	return run
}

// sleepCtx waits d on clk; false if ctx ended or quit closed first (a
// nil quit never does).
func sleepCtx(ctx context.Context, clk clock.Clock, d time.Duration, quit <-chan struct{}) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-quit:
		return false
	}
}

// failure is one request that failed, and when.
type failure struct {
	at   time.Duration
	kind string
}

// maxFailures bounds the failures a failureLog keeps; more are still
// counted by the stream's Result.
const maxFailures = 100_000

// failureLog is a Doer that notes when each failure happened, so that a
// report can say which run of the command caused it.
type failureLog struct {
	Doer
	since   func() time.Duration
	mu      sync.Mutex
	list    []failure
	first   map[string]string // the first error of each kind, for the notes
	refused []refusal         // the limit's refusals, in the order their answers came
}

// refusal is a limit's refusal: when its request was handed to the
// client, and when its answer came. The limit decided in between.
type refusal struct{ sent, got time.Duration }

func (f *failureLog) Do(ctx context.Context, r *Request) Response {
	sent := f.since()
	resp := f.Doer.Do(ctx, r)
	if resp.Err == nil && limitedAnswer(resp.Status, resp.RetryAfter) {
		got := f.since()
		f.mu.Lock()
		if len(f.refused) < maxFailures {
			f.refused = append(f.refused, refusal{sent: sent, got: got})
		}
		f.mu.Unlock()
	}
	if k := failureKind(resp); k != "" {
		f.mu.Lock()
		if len(f.list) < maxFailures {
			f.list = append(f.list, failure{at: f.since(), kind: k})
		}
		if f.first == nil {
			f.first = map[string]string{}
		}
		if _, ok := f.first[k]; !ok && resp.Err != nil {
			f.first[k] = fmt.Sprintf("%s (fresh connection: %v)", resp.Err, r.Fresh)
		}
		f.mu.Unlock()
	}
	return resp
}

// refusals is the refusals sorted by when their answers came.
func (f *failureLog) refusals() []refusal {
	f.mu.Lock()
	out := append([]refusal(nil), f.refused...)
	f.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].got < out[j].got })
	return out
}

func (f *failureLog) failures() []failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]failure(nil), f.list...)
}

// failureKind classes a response that is neither a normal answer nor a
// limit's refusal; "" for those.
func failureKind(r Response) string {
	switch {
	case r.Err != nil && r.TimedOut:
		return "timeout"
	case r.Truncated:
		return "truncated"
	case r.Err != nil && isRefused(r.Err):
		return "refused"
	case r.Err != nil && isReset(r.Err):
		return "reset"
	case r.Err != nil:
		return "error"
	case r.Status >= 200 && r.Status < 300, limitedAnswer(r.Status, r.RetryAfter):
		return ""
	}
	return "status " + strconv.Itoa(r.Status)
}

// limitedAnswer is a limit's refusal: 429, or 503 with Retry-After (as
// Result.Limited counts).
func limitedAnswer(status int, retryAfter bool) bool {
	return status == http.StatusTooManyRequests || (status == http.StatusServiceUnavailable && retryAfter)
}

// phase names when a failure at t happened: before the first run, or in
// run k (from its start until the next one starts).
func phase(runs []commandRun, t time.Duration) string {
	k := sort.Search(len(runs), func(i int) bool { return runs[i].Start > t })
	if k == 0 {
		return "before run 1"
	}
	return "run " + strconv.Itoa(k)
}

// answeredShare is the share of requests due that got a normal answer or
// a limit's refusal; 1 with none.
func answeredShare(rs []*Result) float64 {
	var good, due int64
	for _, x := range rs {
		good += x.OK + x.Limited
		due += x.Sent + x.Overflow
	}
	if due == 0 {
		return 1
	}
	return float64(good) / float64(due)
}

// allowedIn is the most a limit of rate per second admits in d from an
// empty bucket, with tol more: GCRA admits rate × d, plus one at the very
// start.
func allowedIn(rate float64, d time.Duration, tol float64) int64 {
	return int64(math.Floor(rate*d.Seconds()*(1+tol))) + 1
}

// worstExcess is the largest admitted ÷ (limit × window) - 1 over the windows.
func worstExcess(o Options, up *upgradeLoad) float64 {
	worst := math.Inf(-1)
	for i, w := range up.Windows {
		if d := w.span().Seconds(); d > 0 {
			worst = max(worst, float64(up.Admitted[i])/(o.Limit*d)-1)
		}
	}
	if math.IsInf(worst, -1) {
		return 0
	}
	return worst
}

// gradeUpgrade grades what driveUpgrade measured.
func gradeUpgrade(o Options, up *upgradeLoad) []Check {
	var refused, resets, truncated int64
	for _, s := range up.Streams {
		refused += s.Refused
		resets += s.Resets
		truncated += s.Truncated
	}
	ok := 0
	var longest time.Duration
	for _, run := range up.Runs {
		if run.Err == nil {
			ok++
		}
		longest = max(longest, run.End-run.Start)
	}
	cmd := Check{Name: "command succeeded every run", Pass: ok == o.Runs,
		Got:  fmt.Sprintf("%d of %d runs (longest %v)", ok, o.Runs, longest.Round(time.Millisecond)),
		Want: fmt.Sprintf("%d of %d exit 0", o.Runs, o.Runs)}
	if n := len(up.Runs); n > 0 && up.Runs[n-1].Err != nil {
		last := up.Runs[n-1]
		cmd.Got = fmt.Sprintf("run %d of %d failed: %v: %s", n, o.Runs, last.Err, oneLine(last.Output))
	}
	checks := []Check{
		cmd,
		countCheck("no connection refused", refused, up.Failures, "refused"),
		countCheck("no connection reset", resets, up.Failures, "reset"),
		countCheck("no truncated response", truncated, up.Failures, "truncated"),
		answeredCheck(up),
	}
	if o.LimitHost != "" {
		checks = append(checks, windowCheck(o, up))
	}
	if o.Concurrency > 0 {
		checks = append(checks, Check{Name: "backend in flight at most --concurrency", Pass: up.Peak <= int64(o.Concurrency),
			Got:  fmt.Sprintf("%d at once (%s)", up.Peak, o.Host),
			Want: fmt.Sprintf("<= %d", o.Concurrency)})
	}
	if up.H2 != nil {
		checks = append(checks, h2Checks(*up.H2)...)
	}
	return checks
}

// countCheck passes when n is 0, and says in which runs they happened.
func countCheck(name string, n int64, failures map[string]int, kind string) Check {
	got := strconv.FormatInt(n, 10)
	if n > 0 {
		got += " (" + byPhase(failures, kind) + ")"
	}
	return Check{Name: name, Pass: n == 0, Got: got, Want: "0"}
}

// byPhase lists the failures of kind by phase: "run 1: 37, run 2: 4".
func byPhase(failures map[string]int, kind string) string {
	var parts []string
	for k, n := range failures {
		if p, ok := strings.CutPrefix(k, kind+"/"); ok {
			parts = append(parts, fmt.Sprintf("%s: %d", p, n))
		}
	}
	sort.Slice(parts, func(i, j int) bool { return phaseOrder(parts[i]) < phaseOrder(parts[j]) })
	return strings.Join(parts, ", ")
}

// phaseOrder sorts "before run 1" first, then runs by number.
func phaseOrder(s string) int {
	if strings.HasPrefix(s, "before") {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(s[:strings.IndexByte(s, ':')], "run "))
	return n
}

// answeredCheck: every request due got a normal answer (2xx, whole) or a
// limit's refusal (429, 503 with Retry-After).
func answeredCheck(up *upgradeLoad) Check {
	var refused, resets, truncated, timeouts, overflow, errs, due int64
	other := map[string]int64{}
	for _, s := range up.Streams {
		refused += s.Refused
		resets += s.Resets
		truncated += s.Truncated
		timeouts += s.Timeouts
		overflow += s.Overflow
		errs += s.Errors - s.Refused - s.Resets - s.Truncated
		due += s.Sent + s.Overflow
		for code, n := range s.ByStatus {
			if (code < 200 || code >= 300) && code != http.StatusTooManyRequests {
				other[strconv.Itoa(code)] += n
			}
		}
	}
	share := answeredShare(up.Streams)
	got := pct(share) + fmt.Sprintf(" of %d", due)
	var bad []string
	for _, x := range []struct {
		n    int64
		what string
	}{{refused, "refused"}, {resets, "reset"}, {truncated, "truncated"}, {timeouts, "timeouts"},
		{overflow, "overflow"}, {errs, "other errors"}} {
		if x.n > 0 {
			bad = append(bad, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	if share < 1 && len(other) > 0 {
		// a 503 here may be a limit's refusal (with Retry-After) too
		bad = append(bad, "non-2xx besides 429: "+codes(other))
	}
	if len(bad) > 0 {
		got += "; " + strings.Join(bad, ", ")
	}
	return Check{Name: "every request answered normally or refused by a limit", Pass: share == 1,
		Got: got, Want: "100% (2xx whole, 429, or 503 with Retry-After)"}
}

// windowCheck: the limited host's arrivals at the backend, over a window
// around each run, stay within the limit plus BurstTolerance. A window
// opens at the answer to the last refusal before Settle/2 ahead of its run
// (the bucket was empty when the edge decided it, so GCRA's bound holds
// from there, whatever stalls came before), and ends Settle/2 after the
// run. A bucket a reload started full, or two budgets, show as more.
func windowCheck(o Options, up *upgradeLoad) Check {
	c := Check{Name: "admitted per window spanning a run", Pass: true,
		Want: fmt.Sprintf("<= %s/s + %s (+1) in every window", strconv.FormatFloat(o.Limit, 'g', -1, 64), pct(o.BurstTolerance))}
	if len(up.Windows) == 0 {
		c.Pass, c.Got = false, "no run to measure"
		return c
	}
	worst, worstExcess := -1, math.Inf(-1)
	for i, w := range up.Windows {
		if !w.Anchored {
			c.Pass, c.Got = false, fmt.Sprintf("run %d: no refusal of the limited host was answered before its "+
				"window opens, so the bound cannot be applied: the load did not reach the limit (raise "+
				"--limit-offered, or check --limit), or the answers took longer than --settle/2 (raise --settle)", w.Run)
			return c
		}
		n, allowed := up.Admitted[i], allowedIn(o.Limit, w.span(), o.BurstTolerance)
		if n > allowed {
			c.Pass = false
		}
		if ex := float64(n) - float64(allowed); worst < 0 || ex > worstExcess {
			worst, worstExcess = i, ex
		}
	}
	w := up.Windows[worst]
	d := w.span()
	c.Got = fmt.Sprintf("run %d: %d in %v (%.1f/s; %d allowed)", w.Run, up.Admitted[worst], d.Round(time.Millisecond),
		float64(up.Admitted[worst])/d.Seconds(), allowedIn(o.Limit, d, o.BurstTolerance))
	if up.Dropped > 0 {
		c.Pass, c.Got = false, c.Got+fmt.Sprintf("; %d arrivals past the drill's bound were not counted", up.Dropped)
	}
	return c
}

func upgradeNotes(o Options, up *upgradeLoad) []string {
	var notes []string
	var runs []string
	for i, run := range up.Runs {
		s := fmt.Sprintf("run %d %v", i+1, (run.End - run.Start).Round(time.Millisecond))
		if run.Err != nil {
			s += " (" + run.Err.Error() + ")"
		}
		runs = append(runs, s)
	}
	if len(runs) > 0 {
		notes = append(notes, "command: "+strings.Join(runs, ", "))
	}
	if n := len(up.Runs); n > 0 && up.Runs[n-1].Output != "" {
		notes = append(notes, fmt.Sprintf("run %d printed: %s", n, oneLine(up.Runs[n-1].Output)))
	}
	var kinds []string
	seen := map[string]bool{}
	for k := range up.Failures {
		kind, _, _ := strings.Cut(k, "/")
		if !seen[kind] {
			seen[kind] = true
			kinds = append(kinds, kind)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		note := fmt.Sprintf("%s by phase (a run lasts until the next starts): %s", k, byPhase(up.Failures, k))
		if e := up.First[k]; e != "" {
			note += "; the first: " + e
		}
		notes = append(notes, note)
	}
	if t := up.H2; t != nil {
		var per []string
		for k, n := range t.GoAwaysByRun {
			per = append(per, fmt.Sprintf("run %d: %d", k+1, n))
		}
		note := fmt.Sprintf("HTTP/2: %d streams on %d connections; GOAWAYs by run: %s", t.Streams, t.Conns, strings.Join(per, ", "))
		if n := runsWithGoAway(t); n < len(t.GoAwaysByRun) {
			note += fmt.Sprintf("; in %d runs no connection got one: the edge kept its connections (a reload "+
				"in place?), so which process served the streams after it is not known", len(t.GoAwaysByRun)-n)
		}
		notes = append(notes, note)
	}
	note := fmt.Sprintf("most requests to %s in flight at the backend at once: %d", o.Host, up.Peak)
	if o.Concurrency > 0 && up.Peak < int64(o.Concurrency) {
		note += fmt.Sprintf("; below --concurrency %d, so that check could not fail (offer more, or raise --upgrade-hold)", o.Concurrency)
	}
	notes = append(notes, note)
	return notes
}

// runsWithGoAway counts the runs in which a connection got a GOAWAY.
func runsWithGoAway(t *h2Tally) int {
	n := 0
	for _, g := range t.GoAwaysByRun {
		if g > 0 {
			n++
		}
	}
	return n
}

// oneLine joins an output's lines for a table cell.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
