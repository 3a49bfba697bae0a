package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/drill"
)

const drillUsage = `Usage: levee drill NAME|all [flags]

Replays an incident against an HTTP edge (levee or any other proxy) and
grades it. Exit 0 when the edge passes, 1 when it fails a check, 2 on usage
errors. Drills (see docs/drills.md):
  tenant-limit        --host H --limit 750/s --other-host H2 [--offered 10x | 2x:2s,10x:3s]
  batch-storm         --host H [--items 20000 --field uris --path /]
  distribution        --dist-host H [--backends 4 --slow 1 --backend-port P]
  cold-catalog        --hot-host H (or --host H) --cold-domain D [--cold-hosts 500]
  duplicate-instance  --config FILE --host H --limit 750/s (levee only)
  slow-clients        --slow-host H [--slow-conns 1000 --slow-kinds slowloris,slow-body,slow-read --slow-port P]
  grpc                --grpc-authority A [--grpc-rate-authority A2 --grpc-shed-authority A3 --grpc-ca FILE --grpc-method M]
  upgrade             --command CMD --host H [--runs 5 --upgrade-rate 1000/s --limit-host H2 --limit 300/s
                      --concurrency N --upgrade-port P]
  overload            --overload-host H [--slots 32 --service-time 20ms --overload-offered 3x --overload-port P]
  all                 every drill whose flags are given

Flags:
`

// rateFlag is a rate flag ("750/s") read with drill.ParseRate.
type rateFlag struct{ v *float64 }

func (r rateFlag) String() string {
	if r.v == nil || *r.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*r.v, 'g', -1, 64) + "/s"
}

func (r rateFlag) Set(s string) error {
	v, err := drill.ParseRate(s)
	if err != nil {
		return err
	}
	*r.v = v
	return nil
}

// multFlag is a multiple such as "3x" (or "3", "0.25x").
type multFlag struct{ v *float64 }

func (m multFlag) String() string {
	if m.v == nil || *m.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*m.v, 'g', -1, 64) + "x"
}

func (m multFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "x"), 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%q: want a positive multiple such as 3x", s)
	}
	*m.v = v
	return nil
}

// listFlag is a comma-separated list ("slowloris,slow-body").
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l.v = append(*l.v, part)
		}
	}
	if len(*l.v) == 0 {
		return fmt.Errorf("%q: want a comma-separated list", s)
	}
	return nil
}

// sizeFlag is a byte size ("64KiB") read with config.ParseByteSize.
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f sizeFlag) Set(s string) error {
	n, err := config.ParseByteSize(s)
	if err == nil && n == 0 {
		err = fmt.Errorf("%q: want a size above 0", s)
	}
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// headFlag is a byte size where 0 is none (drill.Options.SlowBodyHead < 0).
type headFlag struct{ v *int64 }

func (f headFlag) String() string {
	if f.v == nil || *f.v <= 0 {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f headFlag) Set(s string) error {
	n, err := config.ParseByteSize(s)
	if err != nil {
		return err
	}
	if n == 0 {
		n = -1
	}
	*f.v = n
	return nil
}

// sizesFlag is a comma-separated list of byte sizes ("4KiB,1MiB").
type sizesFlag struct{ v *[]int64 }

func (f sizesFlag) String() string {
	if f.v == nil {
		return ""
	}
	parts := make([]string, len(*f.v))
	for i, n := range *f.v {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}

func (f sizesFlag) Set(s string) error {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		var n int64
		if err := (sizeFlag{&n}).Set(part); err != nil {
			return err
		}
		out = append(out, n)
	}
	*f.v = out
	return nil
}

// offeredFlag is "10x", or steps "2x:2s,10x:3s" (multiples of the limit).
type offeredFlag struct{ o *drill.Options }

func (f offeredFlag) String() string {
	if f.o == nil || f.o.Offered == 0 {
		return ""
	}
	return strconv.FormatFloat(f.o.Offered, 'g', -1, 64) + "x"
}

func (f offeredFlag) Set(s string) error {
	var steps []drill.Step
	for _, part := range strings.Split(s, ",") {
		m, d, stepped := strings.Cut(strings.TrimSpace(part), ":")
		v, err := strconv.ParseFloat(strings.TrimSuffix(m, "x"), 64)
		if err != nil || !(v >= 1) || v > 1000 {
			return fmt.Errorf("%q: want a multiple of the limit in [1, 1000], such as 10x, or steps such as 2x:2s,10x:3s", s)
		}
		if !stepped {
			if strings.Contains(s, ",") {
				return fmt.Errorf("%q: every step needs a duration, such as 2x:2s,10x:3s", s)
			}
			f.o.Offered = v
			return nil
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 || dur > time.Hour {
			return fmt.Errorf("%q: step %q: want MULTIPLE:DURATION such as 10x:3s", s, part)
		}
		steps = append(steps, drill.Step{Rate: v, For: dur})
		f.o.Offered = max(f.o.Offered, v)
	}
	f.o.OfferedSteps = steps
	return nil
}

func drillCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, drillUsage)
			return 0
		}
		fmt.Fprint(stderr, "levee drill: name a drill first\n\n"+drillUsage)
		return exitUsage
	}
	name := args[0]
	var drills []*drill.Drill
	if name == "all" {
		drills = drill.All
	} else if d, ok := drill.Lookup(name); ok {
		drills = []*drill.Drill{d}
	} else {
		fmt.Fprintf(stderr, "levee drill: unknown drill %q (want one of %s, or all)\n", name, strings.Join(drill.Names(), ", "))
		return exitUsage
	}

	var o drill.Options
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, drillUsage); fs.PrintDefaults() }
	fs.StringVar(&o.Target, "target", "http://127.0.0.1:8080", "the edge under test")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each drill's load phase")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "per request, from its intended send time")
	fs.IntVar(&o.MaxInFlight, "max-inflight", 512, "requests outstanding per stream; more are counted as overflow, never queued")
	fs.Int64Var(&o.MaxRequests, "max-requests", 1_000_000, "most requests per stream")
	fs.IntVar(&o.Clients, "clients", 1000, "distinct client identities (X-Client-Id) per stream")
	fs.StringVar(&o.Host, "host", "", "Host of the tenant under test")
	fs.StringVar(&o.OtherHost, "other-host", "", "tenant-limit: a second, well-behaved tenant")
	fs.Var(rateFlag{&o.Limit}, "limit", "the advertised per-tenant limit, e.g. 750/s")
	fs.Var(offeredFlag{&o}, "offered", "offered load as a multiple of --limit (default 10x), or steps such as 2x:2s,10x:3s")
	fs.Var(rateFlag{&o.OtherRate}, "other-rate", "the well-behaved tenant's rate (default 50/s)")
	fs.Float64Var(&o.Tolerance, "tolerance", 0.2, "admitted rate may differ from --limit by this fraction")
	fs.IntVar(&o.Items, "items", 20000, "batch-storm: items in one huge batch")
	fs.StringVar(&o.Field, "field", "uris", "batch-storm: the JSON array field of the batch")
	fs.StringVar(&o.Path, "path", "/", "request path")
	fs.Var(rateFlag{&o.BatchRate}, "batch-rate", "batch-storm: huge batches per second (default 5/s)")
	fs.Var(rateFlag{&o.NormalRate}, "normal-rate", "normal (and hot-host) traffic (default 100/s, at most half of --limit)")
	fs.DurationVar(&o.RefuseWithin, "refuse-within", time.Second, "batch-storm, overload: a refusal must come within this")
	fs.Float64Var(&o.P99Factor, "p99-factor", 3, "p99 under attack may be this multiple of the baseline's...")
	fs.DurationVar(&o.P99Slack, "p99-slack", 100*time.Millisecond, "...or the baseline plus this, whichever is larger")
	fs.StringVar(&o.DistHost, "dist-host", "", "distribution: the Host the edge routes to the drill's backends")
	fs.IntVar(&o.Backends, "backends", 4, "distribution: backends the drill starts")
	fs.IntVar(&o.BackendPort, "backend-port", 0, "distribution: first backend port (0: any free port)")
	fs.IntVar(&o.Slow, "slow", 1, "distribution: how many backends are slow")
	fs.DurationVar(&o.SlowDelay, "slow-delay", 50*time.Millisecond, "distribution: how much slower")
	fs.Var(rateFlag{&o.DistRate}, "dist-rate", "distribution: request rate (default 300/s)")
	fs.Float64Var(&o.MaxSpread, "max-spread", 1.5, "distribution: max/mean over the fast backends")
	fs.Float64Var(&o.SlowShare, "slow-share", 0.8, "distribution: a slow backend's most share of the fast mean")
	fs.DurationVar(&o.RouteWait, "route-wait", 30*time.Second, "distribution: wait this long for the edge to reach the backends")
	fs.StringVar(&o.HotHost, "hot-host", "", "cold-catalog: the hot host (default: --host)")
	fs.StringVar(&o.ColdDomain, "cold-domain", "", "cold-catalog: cold hosts are c-N.DOMAIN")
	fs.IntVar(&o.ColdHosts, "cold-hosts", 500, "cold-catalog: distinct cold hostnames")
	fs.Var(rateFlag{&o.ColdRate}, "cold-rate", "cold-catalog: arrival rate of the cold wave (default 1000/s)")
	fs.DurationVar(&o.ColdBound, "cold-bound", time.Second, "cold-catalog: a cold request is served or shed within this")
	fs.StringVar(&o.OverloadHost, "overload-host", "", "overload: the Host the edge routes to the drill's fixed-capacity backend")
	fs.IntVar(&o.OverloadPort, "overload-port", 0, "overload: the backend's port (0: any free port)")
	fs.IntVar(&o.Slots, "slots", 32, "overload: requests the backend serves at once")
	fs.DurationVar(&o.ServiceTime, "service-time", 20*time.Millisecond, "overload: how long each request holds its slot (capacity = slots / service time)")
	fs.Var(multFlag{&o.OverOffered}, "overload-offered", "overload: offered load as a multiple of the backend's capacity (default 3x)")
	fs.Var(multFlag{&o.OverBase}, "overload-base", "overload: the unloaded baseline's rate as a multiple of capacity (default 0.25x)")
	fs.Float64Var(&o.MinGoodput, "min-goodput", 0.8, "overload: 2xx per second during the overload, as a fraction of capacity, at least")
	fs.StringVar(&o.SlowHost, "slow-host", "", "slow-clients: the Host the edge routes to the drill's backend")
	fs.IntVar(&o.SlowPort, "slow-port", 0, "slow-clients: the backend's port (0: any free port)")
	fs.IntVar(&o.SlowConns, "slow-conns", 1000, "slow-clients: attack connections of each kind")
	fs.Var(listFlag{&o.SlowKinds}, "slow-kinds", "slow-clients: the kinds of attack, at once (default slowloris,slow-body,slow-read)")
	fs.DurationVar(&o.SlowInterval, "slow-interval", time.Second, "slow-clients: between two trickles on one attack connection")
	fs.IntVar(&o.SlowChunk, "slow-chunk", 16, "slow-clients: bytes a slow body sends, or a slow reader reads, per trickle")
	fs.Var(sizesFlag{&o.SlowBodySizes}, "slow-body-size", "slow-clients: slow bodies' Content-Length, one per connection in turn (default 4KiB,1MiB)")
	fs.Var(headFlag{&o.SlowBodyHead}, "slow-body-head", "slow-clients: how much of each slow body is sent at once, before the trickle (default 128KiB; 0: none)")
	fs.Var(sizeFlag{&o.SlowReadSize}, "slow-read-size", "slow-clients: the response a slow reader asks for (default 1MiB)")
	fs.Var(listFlag{&o.SlowSources}, "slow-sources", "slow-clients: the attack's local addresses, one per kind (default 127.0.0.2,127.0.0.3,127.0.0.4 against a loopback edge)")
	fs.Var(rateFlag{&o.VictimRate}, "victim-rate", "slow-clients: the victim's request rate (default 50/s)")
	fs.Float64Var(&o.MinSuccess, "min-success", 0.999, "slow-clients: the victim's 2xx share under attack, at least")
	fs.StringVar(&o.GRPCAuthority, "grpc-authority", "", "grpc: the :authority of the app whose calls pass (over h2c for an http:// --target, h2 for https://)")
	fs.StringVar(&o.GRPCRateAuthority, "grpc-rate-authority", "", "grpc: the :authority of an app whose rate limit refuses calls (default: --grpc-authority)")
	fs.StringVar(&o.GRPCShedAuthority, "grpc-shed-authority", "", "grpc: the :authority of an app whose concurrency limit, with no queue, sheds calls (default: --grpc-authority)")
	fs.StringVar(&o.GRPCCA, "grpc-ca", "", "grpc: PEM roots to verify an https:// --target by (default: the system's)")
	fs.StringVar(&o.GRPCMethod, "grpc-method", "", "grpc: the unary method called, with an empty request, e.g. /grpc.health.v1.Health/Check (default /grpc.testing.TestService/UnaryCall)")
	fs.IntVar(&o.GRPCCalls, "grpc-calls", 1000, "grpc: most unary calls sent to be rate-limited")
	fs.IntVar(&o.GRPCHold, "grpc-hold", 64, "grpc: most calls held open to be shed")
	fs.StringVar(&o.Command, "command", "", "upgrade: the edge's reload or upgrade command, run with sh -c")
	fs.IntVar(&o.Runs, "runs", 5, "upgrade: how many times to run --command")
	fs.DurationVar(&o.CommandTimeout, "command-timeout", 60*time.Second, "upgrade: each run must exit within this")
	fs.DurationVar(&o.Settle, "settle", time.Second, "upgrade: load before the first run and after each; each run's window starts half of it before the run and ends half of it after")
	fs.Var(rateFlag{&o.UpgradeRate}, "upgrade-rate", "upgrade: requests per second to --host, half on fresh connections (default 1000/s)")
	fs.StringVar(&o.LimitHost, "limit-host", "", "upgrade: a Host the edge limits to --limit, to check the admitted rate around each run")
	fs.Var(multFlag{&o.LimitOffered}, "limit-offered", "upgrade: load offered to --limit-host as a multiple of --limit (default 2x)")
	fs.Float64Var(&o.BurstTolerance, "burst-tolerance", 0.02, "upgrade: admitted per window may exceed --limit by this fraction")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "upgrade: --host's concurrency limit at the edge, checked at the backend (0: not checked)")
	fs.IntVar(&o.UpgradePort, "upgrade-port", 0, "upgrade: the backend's port (0: any free port)")
	fs.DurationVar(&o.UpgradeHold, "upgrade-hold", 5*time.Millisecond, "upgrade: how long the backend holds each request")
	fs.Var(sizeFlag{&o.UpgradeBody}, "upgrade-body", "upgrade: bytes in each answer, with Content-Length (default 4KiB)")
	fs.BoolVar(&o.GoClient, "go-client", false, "upgrade: send the HTTP/1.1 load with Go's net/http client instead of the leaner raw one")
	fs.StringVar(&o.H2Target, "h2-target", "", "upgrade: also load this address of the edge over HTTP/2: https:// (TLS) or http:// (h2c)")
	fs.Var(rateFlag{&o.H2Rate}, "h2-rate", "upgrade: requests per second over HTTP/2 to --h2-target (default a quarter of --upgrade-rate)")
	fs.StringVar(&o.H2CA, "h2-ca", "", "upgrade: PEM roots to verify an https:// --h2-target by (default: the system's)")
	fs.StringVar(&o.Config, "config", "", "duplicate-instance: the running levee's config file")
	fs.StringVar(&o.Levee, "levee", "", "duplicate-instance: the levee binary (default: this one)")
	asJSON := fs.Bool("json", false, "print the report card as JSON")
	report := fs.String("report", "", "also write the report card as Markdown to this file")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "levee drill: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := validDrillOptions(o); err != nil {
		fmt.Fprintf(stderr, "levee drill: %v\n", err)
		return exitUsage
	}
	if o.Levee == "" {
		if exe, err := os.Executable(); err == nil {
			o.Levee = exe
		}
	}
	o.Log = stderr
	o = o.Defaults()
	if name != "all" {
		if ok, why := drills[0].Applies(o); !ok {
			fmt.Fprintf(stderr, "levee drill %s: %s\n", name, why)
			return exitUsage
		}
	} else if !anyApplies(o) {
		fmt.Fprintf(stderr, "levee drill all: no drill applies; give at least --host (see levee drill --help)\n")
		return exitUsage
	}

	var live drill.Live
	o.Live = &live
	stopProgress := func() {}
	if f, ok := stdout.(*os.File); ok && !*asJSON && isTerminal(f) {
		stopProgress = progress(f, &live)
	}
	started := time.Now()
	var reports []*drill.Report
	for _, d := range drills {
		reports = append(reports, d.Run(ctx, o))
	}
	stopProgress()
	card := drill.NewCard(o.Target, started, reports)
	if *asJSON {
		err := card.WriteJSON(stdout)
		if err != nil {
			fmt.Fprintf(stderr, "levee drill: %v\n", err)
		}
	} else if err := card.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "levee drill: %v\n", err)
	}
	if *report != "" {
		var b strings.Builder
		_ = card.WriteMarkdown(&b)
		if err := os.WriteFile(*report, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "levee drill: --report: %v\n", err)
			return 1
		}
	}
	if card.Verdict == drill.Pass {
		return 0
	}
	return 1
}

func anyApplies(o drill.Options) bool {
	for _, d := range drill.All {
		if ok, _ := d.Applies(o); ok {
			return true
		}
	}
	return false
}

func validDrillOptions(o drill.Options) error {
	var bad []string
	if !strings.HasPrefix(o.Target, "http://") && !strings.HasPrefix(o.Target, "https://") {
		bad = append(bad, "--target must be an http:// or https:// URL")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--duration", o.Duration}, {"--timeout", o.Timeout}, {"--refuse-within", o.RefuseWithin},
		{"--slow-delay", o.SlowDelay}, {"--route-wait", o.RouteWait}, {"--cold-bound", o.ColdBound}, {"--p99-slack", o.P99Slack},
		{"--service-time", o.ServiceTime}, {"--slow-interval", o.SlowInterval}, {"--command-timeout", o.CommandTimeout},
		{"--settle", o.Settle}, {"--upgrade-hold", o.UpgradeHold}} {
		if d.v <= 0 || d.v > time.Hour {
			bad = append(bad, d.name+" must be in (0, 1h]")
		}
	}
	for _, n := range []struct {
		name   string
		v, lim int64
	}{{"--max-inflight", int64(o.MaxInFlight), 100_000}, {"--max-requests", o.MaxRequests, 100_000_000},
		{"--clients", int64(o.Clients), 10_000_000}, {"--items", int64(o.Items), 10_000_000},
		{"--backends", int64(o.Backends), 64}, {"--cold-hosts", int64(o.ColdHosts), 1_000_000},
		{"--slots", int64(o.Slots), 100_000}, {"--slow-conns", int64(o.SlowConns), 100_000},
		{"--slow-chunk", int64(o.SlowChunk), 1 << 20}, {"--grpc-calls", int64(o.GRPCCalls), 1_000_000},
		{"--grpc-hold", int64(o.GRPCHold), 10_000}, {"--runs", int64(o.Runs), 1000}} {
		if n.v < 1 || n.v > n.lim {
			bad = append(bad, fmt.Sprintf("%s must be 1..%d", n.name, n.lim))
		}
	}
	if o.Slow < 0 || o.BackendPort < 0 || o.BackendPort > 65535-o.Backends {
		bad = append(bad, "--slow and --backend-port must be valid")
	}
	if m := o.GRPCMethod; m != "" && (!strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") || strings.HasPrefix(m, "//")) {
		bad = append(bad, "--grpc-method must be /package.Service/Method")
	}
	if o.OverloadPort < 0 || o.OverloadPort > 65535 {
		bad = append(bad, "--overload-port must be 0..65535")
	}
	// OverOffered and OverBase are 0 only when not given (Defaults sets them)
	if o.OverOffered != 0 && (o.OverOffered < 1 || o.OverOffered > 100) {
		bad = append(bad, "--overload-offered must be 1x..100x")
	}
	if o.OverBase != 0 && o.OverBase >= 1 {
		bad = append(bad, "--overload-base must be below 1x (the baseline is unloaded)")
	}
	if o.MinGoodput <= 0 || o.MinGoodput > 1 {
		bad = append(bad, "--min-goodput must be in (0, 1]")
	}
	if o.MinSuccess <= 0 || o.MinSuccess > 1 {
		bad = append(bad, "--min-success must be in (0, 1]")
	}
	if o.UpgradePort < 0 || o.UpgradePort > 65535 || o.Concurrency < 0 {
		bad = append(bad, "--upgrade-port must be 0..65535, --concurrency at least 0")
	}
	// LimitOffered is 0 only when not given (Defaults sets it); at or below
	// the limit the bucket is not empty when a window opens
	if o.LimitOffered != 0 && (o.LimitOffered <= 1 || o.LimitOffered > 100) {
		bad = append(bad, "--limit-offered must be above 1x, at most 100x")
	}
	if o.BurstTolerance <= 0 || o.BurstTolerance >= 1 {
		bad = append(bad, "--burst-tolerance must be in (0, 1)")
	}
	if o.UpgradeBody < 0 || o.UpgradeBody > 64<<20 {
		bad = append(bad, "--upgrade-body must be 1B..64MiB")
	}
	if o.LimitHost != "" && o.Limit == 0 {
		bad = append(bad, "--limit-host needs --limit")
	}
	if o.SlowPort < 0 || o.SlowPort > 65535 {
		bad = append(bad, "--slow-port must be 0..65535")
	}
	// 0 is unset (Defaults); the backend answers at most 64 MiB
	if o.SlowReadSize < 0 || o.SlowReadSize > 64<<20 {
		bad = append(bad, "--slow-read-size must be 1B..64MiB")
	}
	for _, n := range o.SlowBodySizes {
		if n < 1 || n > 1<<30 {
			bad = append(bad, "--slow-body-size must be 1B..1GiB each")
			break
		}
	}
	if d := o.Defaults(); d.ServiceTime > 0 && float64(d.Slots)/d.ServiceTime.Seconds()*d.OverOffered > 1_000_000 {
		bad = append(bad, "--overload-offered x --slots / --service-time must be at most 1,000,000/s")
	}
	if o.Tolerance <= 0 || o.Tolerance >= 1 || o.P99Factor < 1 || o.MaxSpread < 1 || o.SlowShare <= 0 {
		bad = append(bad, "--tolerance must be in (0, 1), --p99-factor and --max-spread >= 1, --slow-share > 0")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// isTerminal: a character device (a terminal, not a file or a pipe).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress rewrites one line on the terminal every 250 ms until stopped.
func progress(f *os.File, live *drill.Live) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(f, "\r\033[Kdue %d  done %d  ok %d  failed %d", live.Due.Load(), live.Done.Load(), live.OK.Load(), live.Failed.Load())
			}
		}
	}()
	return func() { close(done); <-exited }
}
