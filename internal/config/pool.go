package config

import "strings"

// BackendLimits protect an app's backend pool: what the backends can take,
// enforced at the edge so that overload sheds the heaviest clients first
// instead of every client alike (see internal/protect). Off by default: the
// app's concurrency limit and upstream.max_conns_per_backend already bound
// what reaches a backend; these say what the backends can really serve.
type BackendLimits struct {
	// Inflight is the most requests at the pool's backends at once; 0 is off.
	// At the limit, a client holding inflight ÷ active clients is refused
	// and the others wait (limits.queue bounds the wait).
	Inflight int `yaml:"inflight"`
	// Rate is the pool's request rate; off by default.
	Rate Rate `yaml:"rate"`
	// Burst is how many requests may come at once above Rate; 0 means
	// Rate per second ÷ 10, at least 1. Its lower half is kept for clients
	// that are not heavy.
	Burst int `yaml:"burst"`
}

// PathLimits override an app's request-shape limits under one path prefix
// (limits.per_path). A key left out keeps the app's value.
type PathLimits struct {
	Body        ByteSize `yaml:"body"`
	HeaderBytes ByteSize `yaml:"header_bytes"`
	HeaderCount int      `yaml:"header_count"`
	URLLength   ByteSize `yaml:"url_length"`
	QueryValues int      `yaml:"query_values"`
	Batch       Batch    `yaml:"batch"`
}

// inherit marks a PathLimits key left out: every real value is ≥ 0.
const inherit = -1

// newElem starts each per-path entry with every key inherited, so an
// explicit 0 (no body allowed) differs from a key left out.
func (*PathLimits) newElem() any {
	return &PathLimits{Body: inherit, HeaderBytes: inherit, HeaderCount: inherit, URLLength: inherit,
		QueryValues: inherit, Batch: Batch{Max: inherit}}
}

// MarshalYAML writes only the keys the entry sets, so a printed config
// reads back the same.
func (o PathLimits) MarshalYAML() (any, error) {
	out := map[string]any{}
	for _, kv := range []struct {
		key string
		v   int64
	}{{"body", int64(o.Body)}, {"header_bytes", int64(o.HeaderBytes)}, {"header_count", int64(o.HeaderCount)},
		{"url_length", int64(o.URLLength)}, {"query_values", int64(o.QueryValues)}} {
		if kv.v != inherit {
			out[kv.key] = kv.v
		}
	}
	batch := map[string]any{}
	if o.Batch.JSONField != "" {
		batch["json_field"] = o.Batch.JSONField
	}
	if o.Batch.Max != inherit {
		batch["max"] = o.Batch.Max
	}
	if len(batch) > 0 {
		out["batch"] = batch
	}
	return out, nil
}

// ShapeFor returns the app's shape limits for requests under prefix: l
// with prefix's overrides applied. l is not changed.
func (l Limits) ShapeFor(prefix string) Limits {
	o := l.PerPath[prefix]
	if o == nil {
		return l
	}
	out := l
	if o.Body != inherit {
		out.Body = o.Body
	}
	if o.HeaderBytes != inherit {
		out.HeaderBytes = o.HeaderBytes
	}
	if o.HeaderCount != inherit {
		out.HeaderCount = o.HeaderCount
	}
	if o.URLLength != inherit {
		out.URLLength = o.URLLength
	}
	if o.QueryValues != inherit {
		out.QueryValues = o.QueryValues
	}
	if o.Batch.JSONField != "" {
		out.Batch.JSONField = o.Batch.JSONField
	}
	if o.Batch.Max != inherit {
		out.Batch.Max = o.Batch.Max
	}
	return out
}

// validatePool checks backend_limits; p is the app's field path.
func validatePool(errs *Errors, p string, b BackendLimits) {
	within(errs, p+".backend_limits.inflight", b.Inflight, 0, MaxConcurrency)
	if b.Burst < 0 || b.Burst > 1_000_000 {
		errs.add(p+".backend_limits.burst", "must be 0..1000000 (got %d)", b.Burst)
	}
	if b.Burst > 0 && b.Rate.PerSecond() == 0 {
		errs.add(p+".backend_limits.burst", "needs backend_limits.rate")
	}
}

// validatePerPath checks limits.per_path (p: the limits mapping's path):
// each prefix, and each override
// against the same bounds as the app's own value.
func validatePerPath(errs *Errors, p string, l Limits) {
	for _, prefix := range sortedKeys(l.PerPath) {
		pp := p + ".per_path." + prefix
		if !strings.HasPrefix(prefix, "/") {
			errs.add(pp, "a path prefix must start with /")
			continue
		}
		// Overrides on valid defaults: the app's own values are checked,
		// and reported, once, under limits.
		base := DefaultApp().Limits
		base.Batch, base.PerPath = l.Batch, l.PerPath
		switch b := &base.Batch; {
		case b.JSONField == "" && b.Max != 0:
			b.Max = 0
		case b.JSONField != "" && b.Max < 1:
			b.Max = 1
		}
		validateShape(errs, pp, base.ShapeFor(prefix))
	}
}
