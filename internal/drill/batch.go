package drill

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"
)

var batchStorm = &Drill{
	Name: "batch-storm",
	Incident: "One quiet client sent batches of 20,000 items in a single request; each one tied up the " +
		"backends for seconds and everyone else's requests queued behind it.",
	Applies: func(o Options) (bool, string) { return need("--host", o.Host != "") },
	run: func(ctx context.Context, o Options, r *Report) error {
		body := batchBody(o.Field, o.Items)
		half := max(o.Duration/2, 100*time.Millisecond)
		normal := get(o.Host, o.Path, o.Clients)
		base := stream(ctx, o, "normal, before", constant(o.NormalRate, half, o.MaxRequests), 0, normal)
		var under, batches *Result
		parallel(
			func() {
				under = stream(ctx, o, "normal, during", constant(o.NormalRate, half, o.MaxRequests), 0, normal)
			},
			func() {
				batches = stream(ctx, o, "huge batches", constant(o.BatchRate, half, o.MaxRequests), o.RefuseWithin, func(i int64) Request {
					return Request{Method: "POST", Path: o.Path, Host: o.Host, Body: body, Header: map[string][]string{
						"Content-Type": {"application/json"}, "X-Client-Id": {"batch-client"}}}
				})
			},
		)
		after := stream(ctx, o, "normal, after", constant(o.NormalRate, max(half/4, 100*time.Millisecond), o.MaxRequests), 0, normal)
		r.add(base, under, batches, after)
		r.Checks = gradeBatch(base, under, batches, after, o)
		if due := batches.Sent + batches.Overflow; due > 0 {
			r.ratio("batches refused", float64(batches.RefusedInBound+batches.ResetsInBound)/float64(due))
		}
		r.ratio("normal p99 during/before", p99Ratio(base, under))
		r.Notes = append(r.Notes, fmt.Sprintf("each batch: %d items in %q, %d bytes", o.Items, o.Field, len(body)))
		return nil
	},
}

// batchBody is {"FIELD": ["https://example.com/objects/000000", ...]}.
func batchBody(field string, items int) []byte {
	var b bytes.Buffer
	b.WriteString(`{` + strconv.Quote(field) + `: [`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"https://example.com/objects/%06d"`, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// gradeBatch: batches are refused (4xx, or 429/503 with Retry-After, or the
// connection cut while the body streams) within RefuseWithin; normal traffic
// keeps its success and latency during the storm, and after it.
func gradeBatch(base, under, batches, after *Result, o Options) []Check {
	due := batches.Sent + batches.Overflow
	quick := batches.RefusedInBound + batches.ResetsInBound
	refused := Check{Name: "huge batches refused quickly", Pass: due > 0 && float64(quick) >= 0.99*float64(due),
		Got:  fmt.Sprintf("%d of %d (%s)", quick, due, codes(batches.Codes())),
		Want: fmt.Sprintf(">= 99%% refused (4xx, 503 + Retry-After, or cut off) within %v", o.RefuseWithin)}
	if batches.Resets > 0 {
		refused.Got += fmt.Sprintf(", %d cut off", batches.Resets)
	}
	return []Check{
		refused,
		successCheck("normal traffic success during the storm", under, 0.999),
		p99Check("normal traffic latency during the storm", base, under, o.P99Factor, o.P99Slack),
		successCheck("edge healthy after the storm", after, 0.999),
	}
}
