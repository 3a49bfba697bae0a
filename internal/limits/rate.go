package limits

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/ratelimit"
)

// AppKey is the app-wide limit's key in its store; client keys (header
// values, IP addresses) never contain a NUL byte.
const AppKey = "\x00app"

// Store is where a rate rule decides: a ratelimit.LocalStore in process,
// or a cluster store shared through Redis. The rule does not know which.
type Store interface {
	AllowAt(key string, lim ratelimit.Limit, now time.Time, n int) ratelimit.Decision
	Sweep(now time.Time) int
}

var _ Store = (*ratelimit.LocalStore)(nil)

// Rule is one configured rate limit, composed when the config loads. Its
// Store is set by the owner before the first request; the rest is
// read-only.
type Rule struct {
	Lim    ratelimit.Limit
	Policy ratelimit.Policy
	Reason string
	Store  Store
	// headers are the net/http values of the last refusal's RateLimit
	// fields (see HTTPHeaders); nil until the rule first refuses.
	headers atomic.Pointer[httpValues]
}

// local: r is off, or decides in process (Gate.Local).
func (r *Rule) local() bool {
	if r == nil {
		return true
	}
	_, ok := r.Store.(*ratelimit.LocalStore)
	return ok
}

// httpValues are a rule's RateLimit fields as net/http header values.
type httpValues struct{ policy, rateLimit []string }

// NewRule returns the rule of a validated GCRA limit, named name in its
// RateLimit-Policy, refusing with reason; nil when lim is zero (the rate
// is off). It panics on an invalid one (validated config: a broken
// invariant).
func NewRule(name, reason string, lim ratelimit.Limit) *Rule {
	if lim == (ratelimit.Limit{}) {
		return nil
	}
	policy, err := ratelimit.NewPolicy(name, lim, 0)
	if err != nil {
		panic("limits: a validated rate limit is invalid: " + err.Error())
	}
	return &Rule{Lim: lim, Policy: policy, Reason: reason}
}

// Shadower says whether a rule's refusal is only counted (shadowed): the
// request then goes on as if the bucket had room. It counts the shadowed
// refusal itself.
type Shadower interface {
	Shadowed(rule *Rule) bool
}

// Outcome is what the rate limits decided of one request.
type Outcome struct {
	// Refused is the rule that refused the request (nil: let through),
	// with its Decision.
	Refused  *Rule
	Decision ratelimit.Decision
	// ShadowedApp and ShadowedClient: a shadowed rule would have refused.
	ShadowedApp, ShadowedClient bool
}

// Allow applies the app's rate rule and the client's (either nil: off),
// scaled by f (1: as configured), in an order that spends neither
// limit's budget on a request the other refuses: the app limit is only
// peeked before the client's is spent, so a refusal spends nothing. One
// race is left, as the stores have no refund: a concurrent request that
// takes the app's last unit between the peek and the spend leaves this
// request refused by the app with its client's unit spent (one unit, and
// only when the app is at its limit anyway). It allocates nothing.
func Allow[S Shadower](app, client *Rule, key string, f float64, now time.Time, s S) Outcome {
	var out Outcome
	var appLim ratelimit.Limit
	if app != nil {
		appLim = ScaleRate(app.Lim, f)
		if d := app.Store.AllowAt(AppKey, appLim, now, 0); d.Remaining < 1 {
			d = app.Store.AllowAt(AppKey, appLim, now, 1)
			if !s.Shadowed(app) {
				return Outcome{Refused: app, Decision: d}
			}
			out.ShadowedApp = true
		}
	}
	if client != nil {
		if d := client.Store.AllowAt(key, ScaleRate(client.Lim, f), now, 1); !d.Allowed {
			if !s.Shadowed(client) {
				return Outcome{Refused: client, Decision: d, ShadowedApp: out.ShadowedApp}
			}
			out.ShadowedClient = true
		}
	}
	if app != nil && !out.ShadowedApp {
		if d := app.Store.AllowAt(AppKey, appLim, now, 1); !d.Allowed {
			if !s.Shadowed(app) {
				return Outcome{Refused: app, Decision: d, ShadowedClient: out.ShadowedClient}
			}
			out.ShadowedApp = true
		}
	}
	return out
}

// RetryAfter is the Retry-After of a rate refusal d, at most MaxDepth (a
// Decision that never allows, ratelimit.Never, would overflow).
func RetryAfter(d ratelimit.Decision) time.Duration {
	return time.Duration(min(ratelimit.RetryAfterSeconds(d), int64(ratelimit.MaxDepth/time.Second))) * time.Second
}

// ScaleCount scales a limit by f, never below 1.
func ScaleCount(n int, f float64) int {
	if f >= 1 {
		return n
	}
	return max(1, int(float64(n)*f))
}

// ScaleRate scales a GCRA limit by f: a longer emission interval and a
// smaller burst.
func ScaleRate(l ratelimit.Limit, f float64) ratelimit.Limit {
	if f >= 1 {
		return l
	}
	// At most MaxDepth: one a day scaled by 0.001 would be a limit no store
	// can enforce, which refuses every request.
	iv := float64(l.Interval) / f
	l.Interval = ratelimit.MaxDepth
	if iv < float64(ratelimit.MaxDepth) {
		l.Interval = time.Duration(iv)
	}
	l.Burst = ScaleCount(l.Burst, f)
	if int64(l.Burst) > int64(ratelimit.MaxDepth)/int64(l.Interval) {
		l.Burst = 1
	}
	return l
}

// HTTPHeaders sets the IETF RateLimit fields of rule's refusal d on a
// net/http header map. The values are shared with the rule's other
// refusals that read the same (most, under overload: they differ only in
// the seconds until the next request is let through), so a refusal
// allocates only when its value changes, and they must not be modified,
// as package reply's are not.
func (rule *Rule) HTTPHeaders(h http.Header, d ratelimit.Decision) {
	var buf [64]byte
	b := rule.Policy.AppendRateLimit(buf[:0], d)
	v := rule.headers.Load()
	if v == nil || v.rateLimit[0] != string(b) {
		nv := &httpValues{rateLimit: []string{string(b)}}
		if v != nil {
			nv.policy = v.policy
		} else {
			nv.policy = []string{rule.Policy.Header()}
		}
		rule.headers.Store(nv)
		v = nv
	}
	h["Ratelimit-Policy"] = v.policy
	h["Ratelimit"] = v.rateLimit
}
