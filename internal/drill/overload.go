package drill

import (
	"context"
	"fmt"
	"time"
)

var overload = &Drill{
	Name: "overload",
	Incident: "A backend that could serve a fixed number of requests at once got several times its capacity: " +
		"the edge in front queued the excess instead of refusing it, latency climbed past the clients' timeouts, " +
		"and the backend spent its capacity on answers nobody waited for.",
	Applies: func(o Options) (bool, string) { return need("--overload-host", o.OverloadHost != "") },
	run:     runOverload,
}

// capacity is the overload drill's backend capacity, requests per second.
func (o Options) capacity() float64 { return float64(o.Slots) / o.ServiceTime.Seconds() }

// OverloadSnippet is the levee config that routes host to the overload
// drill's backend with the protection that fits it: as many requests in
// flight as the backend has slots, and a short bounded queue that keeps the
// slots busy between answers without holding the excess.
func OverloadSnippet(host string, b *Backend, slots int) string {
	return fmt.Sprintf("apps:\n  overload:\n    hosts: [%s]\n    backends: [%s]\n"+
		"    limits: {concurrency: %d, queue: {max_wait: 10ms, max_len: %d}}\n", host, b.Addr, slots, 2*slots)
}

// runOverload starts the fixed-capacity backend, waits for the edge to route
// to it, then measures an unloaded baseline (OverBase × capacity for half of
// Duration) and the overload (OverOffered × capacity for Duration).
func runOverload(ctx context.Context, o Options, r *Report) error {
	b, err := StartPool(o.Slots, o.ServiceTime, o.OverloadPort)
	if err != nil {
		return err
	}
	bs := []*Backend{b}
	defer CloseBackends(bs)
	capacity := o.capacity()
	lead := fmt.Sprintf("overload: a backend of %d slots x %v (%.0f req/s) listens on %s; point the edge at it "+
		"with its overload protection", o.Slots, o.ServiceTime, capacity, b.Addr)
	if err := pointEdge(ctx, o, lead, o.OverloadHost, OverloadSnippet(o.OverloadHost, b, o.Slots), bs); err != nil {
		return err
	}
	mk := get(o.OverloadHost, o.Path, o.Clients)
	half := max(o.Duration/2, 100*time.Millisecond)
	base := stream(ctx, o, "unloaded "+o.OverloadHost, constant(o.OverBase*capacity, half, o.MaxRequests), 0, mk)
	b.Reset()
	under := stream(ctx, o, fmt.Sprintf("%gx capacity %s", o.OverOffered, o.OverloadHost),
		constant(o.OverOffered*capacity, o.Duration, o.MaxRequests), o.RefuseWithin, mk)
	served, peak := b.Count(), b.PeakWaiting()
	r.add(base, under)
	r.Checks = gradeOverload(base, under, capacity, o)
	r.ratio("goodput/capacity", under.Goodput()/capacity)
	r.ratio("served p99 overload/unloaded", p99Ratio(base, under))
	r.ratio("excess refused at once", quickShare(under))
	r.Notes = append(r.Notes,
		fmt.Sprintf("backend: %d slots x %v = %.0f req/s; during the overload it served %d requests, %d of them "+
			"a 2xx its client still waited for", o.Slots, o.ServiceTime, capacity, served, under.OK),
		fmt.Sprintf("most requests waiting at the backend for a slot at once: %d (an edge that holds back its excess keeps this near 0)", peak))
	return nil
}

// unserved is every request of the overload that got no 2xx: refusals,
// errors, timeouts and overflow (due while MaxInFlight were outstanding: the
// edge held them, it did not shed them).
func unserved(x *Result) int64 { return x.Non2xx + x.Errors + x.Timeouts + x.Overflow }

// quick is the refusals answered within Bound: a non-2xx status, or a
// connection cut or refused. A timeout never counts.
func quick(x *Result) int64 {
	return x.InBoundCount(0, 199) + x.InBoundCount(300, 999) + x.ErrorsInBound
}

// quickShare is quick over unserved; 1 when every request was served.
func quickShare(x *Result) float64 {
	if n := unserved(x); n > 0 {
		return float64(quick(x)) / float64(n)
	}
	return 1
}

// gradeOverload: goodput during the overload is at least MinGoodput of
// capacity; served p99 stays within the baseline's bound; at least 99% of
// the requests not served are refused within RefuseWithin (Bound of under).
func gradeOverload(base, under *Result, capacity float64, o Options) []Check {
	g := under.Goodput() / capacity
	goodput := Check{
		Name: "goodput (2xx/s ÷ capacity)",
		Pass: g >= o.MinGoodput,
		Got:  fmt.Sprintf("%.2f (%.0f/s of %.0f/s capacity, %.0f/s offered)", g, under.Goodput(), capacity, under.OfferedRate()),
		Want: fmt.Sprintf(">= %g", o.MinGoodput),
	}
	n, q := unserved(under), quick(under)
	shed := Check{
		Name: "excess refused at once, not timed out",
		Pass: n == 0 || float64(q) >= 0.99*float64(n),
		Got:  "every request served",
		Want: fmt.Sprintf(">= 99%% of requests not served refused (non-2xx or cut off) within %v", under.Bound),
	}
	if n > 0 {
		p99 := ""
		if under.RejLat.Count() > 0 {
			p99 = fmt.Sprintf(", refusal p99 %v", under.RejLat.Quantile(0.99).Round(time.Microsecond))
		}
		shed.Got = fmt.Sprintf("%s (%d of %d within %v%s; %s; %d errors, %d timeouts, %d overflow)",
			pct(float64(q)/float64(n)), q, n, under.Bound, p99, codes(under.Codes()), under.Errors, under.Timeouts, under.Overflow)
	}
	return []Check{
		goodput,
		p99Check("served latency under overload", base, under, o.P99Factor, o.P99Slack),
		shed,
	}
}
