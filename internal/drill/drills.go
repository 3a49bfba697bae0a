package drill

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/leveeproxy/levee/internal/clock"
)

// Options configure every drill; each drill reads the ones it needs.
// Defaults() fills the zero values.
type Options struct {
	Target      string        // the edge, http://host:port
	Duration    time.Duration // length of a drill's main load phase
	Timeout     time.Duration // per request, from its intended send time
	MaxInFlight int           // per stream; beyond it requests overflow (a failure)
	MaxRequests int64         // per stream
	Clients     int           // distinct client identities (X-Client-Id) per stream

	// tenant-limit (and duplicate-instance)
	Host      string  // the tenant under test
	OtherHost string  // a second, well-behaved tenant
	Limit     float64 // the advertised limit, requests per second
	Offered   float64 // offered load as a multiple of Limit
	// OfferedSteps, when set, is a stepped flood instead: each step's Rate is
	// a multiple of Limit (at least 1, so the limit is always what is admitted).
	OfferedSteps []Step
	OtherRate    float64 // the well-behaved tenant's rate
	Tolerance    float64 // admitted rate may differ from Limit by this fraction

	// batch-storm
	Items        int           // items in one huge batch
	Field        string        // the JSON array field holding them
	Path         string        // where batches and normal traffic go
	BatchRate    float64       // huge batches per second
	NormalRate   float64       // normal requests per second (also the hot host's rate in cold-catalog)
	RefuseWithin time.Duration // a refusal slower than this does not count as quick (batch-storm, overload)

	// latency under attack vs. the baseline: allowed p99 = max(P99Factor × baseline, baseline + P99Slack)
	P99Factor float64
	P99Slack  time.Duration

	// distribution
	DistHost    string        // the Host the edge routes to the drill's backends
	Backends    int           // how many backends the drill starts
	BackendPort int           // first port (0: any free port)
	Slow        int           // how many of them are slow
	SlowDelay   time.Duration // added to each slow backend's answers
	DistRate    float64       // requests per second
	MaxSpread   float64       // max/mean over the fast backends
	SlowShare   float64       // a slow backend may get at most this fraction of a fast one's mean
	RouteWait   time.Duration // how long to wait for the edge to route to the backends
	// OnBackends is told the backends and the levee config snippet once they
	// listen (the CLI prints it; tests start an edge).
	OnBackends func(snippet string, bs []*Backend) error

	// cold-catalog
	HotHost    string        // the hot host (default: Host)
	ColdDomain string        // cold hosts are c-N.ColdDomain
	ColdHosts  int           // distinct cold hostnames
	ColdRate   float64       // arrival rate of the cold burst
	ColdBound  time.Duration // a cold request must be answered (served or shed) within this
	ColdShare  float64       // fraction of cold requests that must meet ColdBound

	// overload: capacity = Slots / ServiceTime requests per second
	OverloadHost string        // the Host the edge routes to the drill's fixed-capacity backend
	OverloadPort int           // that backend's port (0: any free port)
	Slots        int           // requests the backend serves at once
	ServiceTime  time.Duration // how long each holds its slot
	OverOffered  float64       // the overload, as a multiple of capacity
	OverBase     float64       // the unloaded baseline's rate, as a fraction of capacity
	MinGoodput   float64       // 2xx per second during the overload, as a fraction of capacity, at least

	// slow-clients
	SlowHost      string        // the Host the edge routes to the drill's backend
	SlowPort      int           // that backend's port (0: any free port)
	SlowConns     int           // attack connections of each kind
	SlowKinds     []string      // slowloris, slow-body, slow-read: the kinds of attack; nil: all three at once
	SlowInterval  time.Duration // between two trickles on one attack connection
	SlowChunk     int           // bytes written (slow-body) or read (slow-read) per trickle
	SlowBodySizes []int64       // slow-body's Content-Lengths, one per connection in turn
	SlowBodyHead  int64         // how much of each body is sent at once (SlowAttack.BodyHead: 0 default, < 0 none)
	SlowReadSize  int64         // the size of the response slow-read asks for
	// SlowSources are the attack's local addresses, one per kind (see
	// SlowAttack.Sources); nil: 127.0.0.2, .3 and .4 against a loopback
	// target, so that the attack is not the victim's address (an edge may
	// bound connections per address), else the system's choice.
	SlowSources []string
	VictimRate  float64 // the victim's requests per second
	MinSuccess  float64 // the victim's 2xx share under attack, at least

	// grpc: calls of grpc.testing.TestService over h2c (an http:// Target)
	// or h2 (https://)
	GRPCAuthority     string // the app that passes calls
	GRPCRateAuthority string // an app whose rate limit refuses calls (default: GRPCAuthority)
	GRPCShedAuthority string // an app whose concurrency limit, with no queue, sheds calls (default: GRPCAuthority)
	GRPCCA            string // PEM roots to verify an https:// target by; "": the system's
	GRPCMethod        string // the unary method called (with an empty request); default TestService's UnaryCall
	GRPCCalls         int    // most unary calls sent to be rate-limited
	GRPCHold          int    // most calls held open to be shed
	// upgrade: the edge's reload or upgrade command, run Runs times under
	// load to Host (UpgradeRate) and, with LimitHost, to a host limited to
	// Limit (LimitOffered x Limit)
	Command        string        // run with sh -c
	Runs           int           // how many times
	CommandTimeout time.Duration // each run must exit within this
	Settle         time.Duration // load before the first run, after each, and half of it around each run's window
	UpgradeRate    float64       // requests per second to Host, half on fresh connections
	LimitHost      string        // a host the edge limits to Limit per second ("": no burst check)
	LimitOffered   float64       // LimitHost's offered load, as a multiple of Limit
	BurstTolerance float64       // admitted per window may exceed Limit by this fraction
	Concurrency    int           // Host's concurrency limit at the edge (0: not checked)
	UpgradePort    int           // the drill backend's port (0: any free port)
	UpgradeHold    time.Duration // the backend holds each request this long
	UpgradeBody    int64         // bytes in each answer, with Content-Length
	// GoClient sends the HTTP/1.1 load with net/http's client instead of
	// the raw one (RawDoer), which costs the generator less per request.
	GoClient bool
	// H2Target, when set, is a second address of the edge that the
	// upgrade drill also loads over HTTP/2 at H2Rate: https:// (TLS,
	// ALPN h2, verified by H2CA's roots, or the system's) or http://
	// (h2c with prior knowledge), a few kept-alive connections carrying
	// many streams each, which a drain must end with GOAWAY.
	H2Target string
	H2Rate   float64
	H2CA     string

	// duplicate-instance (levee only)
	Config string // the running levee's config file
	Levee  string // the levee binary to start a second time
	// StartWait bounds how long the second instance may take to refuse or get ready.
	StartWait time.Duration

	Clock clock.Clock // nil: real
	Live  *Live       // nil: no progress
	Log   io.Writer   // notes while running (the config snippet); nil: discarded
}

// Defaults returns o with every zero value set to its default.
func (o Options) Defaults() Options {
	def := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defI := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if o.Target == "" {
		o.Target = "http://127.0.0.1:8080"
	}
	o.Target = strings.TrimSuffix(o.Target, "/")
	defD(&o.Duration, 5*time.Second)
	defD(&o.Timeout, 2*time.Second)
	defI(&o.MaxInFlight, 512)
	if o.MaxRequests == 0 {
		o.MaxRequests = 1_000_000
	}
	defI(&o.Clients, 1000)
	def(&o.Offered, 10)
	def(&o.OtherRate, 50)
	def(&o.Tolerance, 0.2)
	defI(&o.Items, 20000)
	if o.Field == "" {
		o.Field = "uris"
	}
	if o.Path == "" {
		o.Path = "/"
	}
	def(&o.BatchRate, 5)
	// normal traffic stays well inside an advertised limit, so only the
	// attack can push the tenant over it
	if o.NormalRate == 0 {
		o.NormalRate = 100
		if o.Limit > 0 {
			o.NormalRate = min(100, o.Limit/2)
		}
	}
	defD(&o.RefuseWithin, time.Second)
	def(&o.P99Factor, 3)
	defD(&o.P99Slack, 100*time.Millisecond)
	defI(&o.Backends, 4)
	defI(&o.Slow, 1)
	defD(&o.SlowDelay, 50*time.Millisecond)
	def(&o.DistRate, 300)
	def(&o.MaxSpread, 1.5)
	def(&o.SlowShare, 0.8)
	defD(&o.RouteWait, 30*time.Second)
	if o.HotHost == "" {
		o.HotHost = o.Host
	}
	defI(&o.ColdHosts, 500)
	def(&o.ColdRate, 1000)
	defD(&o.ColdBound, time.Second)
	def(&o.ColdShare, 0.99)
	defI(&o.Slots, 32)
	defD(&o.ServiceTime, 20*time.Millisecond)
	def(&o.OverOffered, 3)
	def(&o.OverBase, 0.25)
	def(&o.MinGoodput, 0.8)
	defD(&o.StartWait, 10*time.Second)
	defI(&o.SlowConns, 1000)
	defD(&o.SlowInterval, slowInterval)
	defI(&o.SlowChunk, slowChunk)
	if len(o.SlowBodySizes) == 0 {
		o.SlowBodySizes = slowBodySizes()
	}
	if o.SlowReadSize == 0 {
		o.SlowReadSize = 1 << 20
	}
	if o.GRPCRateAuthority == "" {
		o.GRPCRateAuthority = o.GRPCAuthority
	}
	if o.GRPCShedAuthority == "" {
		o.GRPCShedAuthority = o.GRPCAuthority
	}
	if o.GRPCMethod == "" {
		o.GRPCMethod = testgrpc.TestService_UnaryCall_FullMethodName
	}
	defI(&o.GRPCCalls, 1000)
	defI(&o.GRPCHold, 64)
	defI(&o.Runs, 5)
	defD(&o.CommandTimeout, 60*time.Second)
	defD(&o.Settle, time.Second)
	def(&o.UpgradeRate, 1000)
	if o.H2Target != "" {
		def(&o.H2Rate, o.UpgradeRate/4)
	}
	def(&o.LimitOffered, 2)
	def(&o.BurstTolerance, 0.02)
	defD(&o.UpgradeHold, 5*time.Millisecond)
	if o.UpgradeBody == 0 {
		o.UpgradeBody = 4 << 10
	}
	def(&o.VictimRate, 50)
	def(&o.MinSuccess, 0.999)
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Drill is one incident replay. A new drill is a *Drill in All: Applies
// names the flags it needs (so `levee drill all` can skip it, saying why),
// run sends its streams with stream() and sets r.Checks with a pure grading
// function that tests can feed fixed Results.
type Drill struct {
	Name     string
	Incident string
	// Applies says whether the options give the drill what it needs, and if
	// not, what is missing.
	Applies func(o Options) (bool, string)
	run     func(ctx context.Context, o Options, r *Report) error
}

// All is every drill, in the order `levee drill all` runs them: upgrade
// after the others that leave the edge as it was, as it replaces the edge's
// process; overload last, as it saturates the edge on purpose.
var All = []*Drill{tenantLimit, batchStorm, distribution, coldCatalog, duplicateInstance, slowClients, grpcDrill, upgradeDrill, overload}

// Lookup finds a drill by name.
func Lookup(name string) (*Drill, bool) {
	for _, d := range All {
		if d.Name == name {
			return d, true
		}
	}
	return nil, false
}

// Names lists the drills' names.
func Names() []string {
	out := make([]string, len(All))
	for i, d := range All {
		out[i] = d.Name
	}
	return out
}

// Run runs the drill (o already has its defaults) and grades it. A drill that
// does not apply is skipped; one that cannot run reports an error verdict.
func (d *Drill) Run(ctx context.Context, o Options) *Report {
	r := &Report{Drill: d.Name, Incident: d.Incident, Target: o.Target, Checks: []Check{}, Streams: []Stream{}}
	if ok, why := d.Applies(o); !ok {
		r.Verdict, r.Reason = Skipped, why
		return r
	}
	start := time.Now()
	err := d.run(ctx, o, r)
	r.Seconds = round3(time.Since(start).Seconds())
	if err != nil {
		r.Verdict, r.Reason = Errored, err.Error()
		return r
	}
	if ctx.Err() != nil {
		r.Verdict, r.Reason = Errored, "interrupted"
		return r
	}
	var sent, answered int64
	for _, s := range r.Streams {
		sent += s.Sent
		answered += s.OK + s.Non2xx
	}
	if sent > 0 && answered == 0 {
		r.Verdict, r.Reason = Errored, fmt.Sprintf("no answer to any of %d requests: is %s the edge?", sent, o.Target)
		return r
	}
	for _, s := range r.Streams {
		if s.Overflow > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d requests were due while %d were outstanding and were not sent "+
				"(the edge stalled, or this machine could not keep up)", s.Name, s.Overflow, o.MaxInFlight))
		}
	}
	r.grade()
	return r
}

// stream runs one plan against the target with a connection pool of its own,
// so one stream's backlog never holds up another's connections.
func stream(ctx context.Context, o Options, name string, sched *Schedule, bound time.Duration, mk func(i int64) Request) *Result {
	d := NewHTTPDoer(o.Target, o.MaxInFlight)
	defer d.Close()
	return Run(ctx, o.Clock, Plan{Name: name, Schedule: sched, MaxInFlight: o.MaxInFlight, Timeout: o.Timeout, Bound: bound, Make: mk}, d, o.Live)
}

// parallel runs fns at once and waits for all.
func parallel(fns ...func()) {
	done := make(chan struct{}, len(fns))
	for _, f := range fns {
		go func() { defer func() { done <- struct{}{} }(); f() }()
	}
	for range fns {
		<-done
	}
}

// get is the request maker of plain GETs to host from many client identities.
func get(host, path string, clients int) func(i int64) Request {
	return func(i int64) Request {
		return Request{Path: path, Host: host, Header: map[string][]string{"X-Client-Id": {"client-" + strconv.FormatInt(i%int64(max(clients, 1)), 10)}}}
	}
}

func need(pairs ...any) (bool, string) {
	var missing []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if !pairs[i+1].(bool) {
			missing = append(missing, pairs[i].(string))
		}
	}
	if len(missing) > 0 {
		return false, "needs " + strings.Join(missing, ", ")
	}
	return true, ""
}

func constant(rate float64, d time.Duration, max int64) *Schedule {
	s, err := Constant(rate, d, max)
	if err != nil { // rates and durations are validated before a drill runs
		panic(err)
	}
	return s
}

// p99Check grades latency under attack against a baseline:
// allowed = max(factor × base, base + slack).
func p99Check(name string, base, under *Result, factor float64, slack time.Duration) Check {
	b, u := base.OKLat.Quantile(0.99), under.OKLat.Quantile(0.99)
	allowed := max(time.Duration(factor*float64(b)), b+slack)
	return Check{
		Name: name,
		Pass: under.OKLat.Count() > 0 && u <= allowed,
		Got:  fmt.Sprintf("p99 %v (baseline %v)", u.Round(time.Microsecond), b.Round(time.Microsecond)),
		Want: fmt.Sprintf("<= %v (max(%gx, +%v))", allowed.Round(time.Microsecond), factor, slack),
	}
}

// successCheck grades a stream's 2xx share of every request due.
func successCheck(name string, r *Result, min float64) Check {
	got := r.SuccessRatio()
	return Check{Name: name, Pass: r.Sent+r.Overflow > 0 && got >= min,
		Got:  fmt.Sprintf("%s (%d of %d)", pct(got), r.OK, r.Sent+r.Overflow),
		Want: ">= " + pct(min)}
}
