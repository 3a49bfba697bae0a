package drill

import (
	"context"
	"fmt"
	"strings"
	"time"
)

var distribution = &Drill{
	Name: "distribution",
	Incident: "Least-request balancing looked random in practice and a slow backend kept its full share, " +
		"so its queue grew while the fast ones idled.",
	Applies: func(o Options) (bool, string) {
		if o.Slow >= o.Backends {
			return false, "--slow must leave at least one fast backend"
		}
		return need("--dist-host", o.DistHost != "")
	},
	run: func(ctx context.Context, o Options, r *Report) error {
		bs, err := StartBackends(o.Backends, o.BackendPort)
		if err != nil {
			return err
		}
		defer CloseBackends(bs)
		lead := fmt.Sprintf("distribution: %d backends listening; point the edge at them", len(bs))
		if err := pointEdge(ctx, o, lead, o.DistHost, Snippet(o.DistHost, bs), bs); err != nil {
			return err
		}
		for i, b := range bs {
			if i < o.Slow {
				b.Delay.Store(int64(o.SlowDelay))
			}
			b.Reset()
		}
		res := stream(ctx, o, "spread "+o.DistHost, constant(o.DistRate, o.Duration, o.MaxRequests), 0, get(o.DistHost, o.Path, o.Clients))
		r.add(res)
		counts := make([]int64, len(bs))
		var names []string
		for i, b := range bs {
			counts[i] = b.Count()
			kind := "fast"
			if i < o.Slow {
				kind = "slow"
			}
			names = append(names, fmt.Sprintf("%s %s (%s): %d", b.Name, b.Addr, kind, counts[i]))
		}
		r.Checks = gradeDistribution(counts, o.Slow, o.MaxSpread, o.SlowShare)
		var fast int64
		for _, c := range counts[o.Slow:] {
			fast += c
		}
		if mean := float64(fast) / float64(len(counts)-o.Slow); mean > 0 {
			var top int64
			for _, c := range counts[o.Slow:] {
				top = max(top, c)
			}
			r.ratio("fast max/mean", float64(top)/mean)
			if o.Slow > 0 {
				r.ratio("slow/fast mean", float64(counts[0])/mean)
			}
		}
		r.Checks = append(r.Checks, successCheck("requests succeed", res, 0.999))
		r.Notes = append(r.Notes, "requests per backend: "+strings.Join(names, "; "),
			fmt.Sprintf("slow backends answer %v later than fast ones", o.SlowDelay.Round(time.Millisecond)))
		return nil
	},
}

// gradeDistribution: counts[:slow] are the slow backends. The fast ones'
// max/mean is at most maxSpread; each slow one gets at most slowShare of the
// fast ones' mean.
func gradeDistribution(counts []int64, slow int, maxSpread, slowShare float64) []Check {
	fast := counts[slow:]
	var sum, top int64
	for _, c := range fast {
		sum += c
		top = max(top, c)
	}
	mean := float64(sum) / float64(len(fast))
	spread := Check{Name: "spread over the fast backends (max/mean)", Want: fmt.Sprintf("<= %g", maxSpread)}
	if mean > 0 {
		s := float64(top) / mean
		spread.Pass, spread.Got = s <= maxSpread, fmt.Sprintf("%.2f (max %d, mean %.1f)", s, top, mean)
	} else {
		spread.Got = "no requests reached the fast backends"
	}
	out := []Check{spread}
	for i, c := range counts[:slow] {
		share := 0.0
		if mean > 0 {
			share = float64(c) / mean
		}
		out = append(out, Check{
			Name: fmt.Sprintf("slow backend %d gets less", i+1),
			Pass: mean > 0 && share <= slowShare,
			Got:  fmt.Sprintf("%d requests, %.2f of the fast mean", c, share),
			Want: fmt.Sprintf("<= %g of the fast mean", slowShare),
		})
	}
	return out
}
