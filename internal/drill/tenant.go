package drill

import (
	"context"
	"fmt"
	"math"
)

var tenantLimit = &Drill{
	Name: "tenant-limit",
	Incident: "A tenant's advertised rate limit was not what the edge enforced: a flood from one tenant " +
		"went through (or took its neighbours down with it) instead of being cut to the limit.",
	Applies: func(o Options) (bool, string) {
		return need("--host", o.Host != "", "--limit", o.Limit > 0, "--other-host", o.OtherHost != "")
	},
	run: func(ctx context.Context, o Options, r *Report) error {
		flood := constant(o.Limit*o.Offered, o.Duration, o.MaxRequests)
		if len(o.OfferedSteps) > 0 {
			steps := make([]Step, len(o.OfferedSteps))
			for i, s := range o.OfferedSteps {
				steps[i] = Step{Rate: s.Rate * o.Limit, For: s.For}
			}
			var err error
			if flood, err = NewSchedule(steps, o.MaxRequests); err != nil {
				return err
			}
		}
		other := constant(o.OtherRate, flood.Span(), o.MaxRequests)
		var f, w *Result
		parallel(
			func() { f = stream(ctx, o, "flood "+o.Host, flood, 0, get(o.Host, o.Path, o.Clients)) },
			func() { w = stream(ctx, o, "steady "+o.OtherHost, other, 0, get(o.OtherHost, o.Path, o.Clients)) },
		)
		r.add(f, w)
		r.Checks = gradeTenant(f, w, o.Limit, o.Tolerance)
		r.ratio("admitted/limit", f.OKRate()/o.Limit)
		r.ratio("other tenant success", w.SuccessRatio())
		return nil
	},
}

// gradeTenant: the flood's admitted rate is within tol of limit, its
// refusals are 429/503 with Retry-After, and the other tenant keeps 99.9%.
func gradeTenant(flood, other *Result, limit, tol float64) []Check {
	admitted := flood.OKRate()
	// Overflow is the generator's own limit, not an answer from the edge.
	refused := flood.Non2xx + flood.Timeouts + flood.Errors
	clear := Check{Name: "refusals are 429/503 with Retry-After", Pass: true, Got: "none refused", Want: ">= 99.9% of refusals"}
	if refused > 0 {
		share := float64(flood.Refusals) / float64(refused)
		clear.Pass = share >= 0.999
		clear.Got = fmt.Sprintf("%s (%d of %d)", pct(share), flood.Refusals, refused)
	}
	return []Check{
		{
			Name: "admitted rate",
			Pass: math.Abs(admitted-limit) <= tol*limit,
			Got:  fmt.Sprintf("%.1f/s of %.0f/s offered", admitted, flood.OfferedRate()),
			Want: fmt.Sprintf("%g/s ± %.0f%%", limit, 100*tol),
		},
		clear,
		successCheck("other tenant's success", other, 0.999),
	}
}
