package drill

import (
	"context"
	"fmt"
	"time"
)

var coldCatalog = &Drill{
	Name: "cold-catalog",
	Incident: "An edge that loaded its service catalog lazily queued every miss for a store connection " +
		"without bound: a wave of cold hostnames pushed latency from 500 ms to seconds for every app, " +
		"hot ones included, until a restart.",
	Applies: func(o Options) (bool, string) {
		return need("--hot-host or --host", o.HotHost != "", "--cold-domain", o.ColdDomain != "")
	},
	run: func(ctx context.Context, o Options, r *Report) error {
		half := max(o.Duration/2, 100*time.Millisecond)
		hot := get(o.HotHost, o.Path, o.Clients)
		base := stream(ctx, o, "hot, before", constant(o.NormalRate, half, o.MaxRequests), 0, hot)
		burst := constant(o.ColdRate, time.Duration(float64(o.ColdHosts)/o.ColdRate*float64(time.Second))+time.Millisecond, int64(o.ColdHosts))
		var under, cold *Result
		parallel(
			func() {
				under = stream(ctx, o, "hot, during", constant(o.NormalRate, max(half, burst.Span()), o.MaxRequests), 0, hot)
			},
			func() {
				cold = stream(ctx, o, "cold hosts", burst, o.ColdBound, func(i int64) Request {
					return Request{Path: o.Path, Host: fmt.Sprintf("c-%d.%s", i, o.ColdDomain)}
				})
			},
		)
		r.add(base, under, cold)
		r.Checks = gradeCold(base, under, cold, o)
		r.ratio("hot p99 during/before", p99Ratio(base, under))
		r.Notes = append(r.Notes, fmt.Sprintf("%d distinct cold hosts c-N.%s at %g/s", cold.Scheduled, o.ColdDomain, o.ColdRate))
		return nil
	},
}

// gradeCold: the hot host keeps its success and p99; cold requests are
// served (2xx, 404) or shed (429/503) within ColdBound, never left waiting.
func gradeCold(base, under, cold *Result, o Options) []Check {
	due := cold.Sent + cold.Overflow
	answered := cold.InBoundCount(200, 299) + cold.InBoundCount(404, 404) + cold.InBoundCount(429, 429) + cold.InBoundCount(503, 503)
	return []Check{
		successCheck("hot host success during the cold burst", under, 0.999),
		p99Check("hot host latency during the cold burst", base, under, o.P99Factor, o.P99Slack),
		{
			Name: "cold hosts served or shed in time",
			Pass: due > 0 && float64(answered) >= o.ColdShare*float64(due),
			Got:  fmt.Sprintf("%d of %d within %v (%s)", answered, due, o.ColdBound, codes(cold.Codes())),
			Want: fmt.Sprintf(">= %s answered 2xx/404/429/503 within %v", pct(o.ColdShare), o.ColdBound),
		},
	}
}
