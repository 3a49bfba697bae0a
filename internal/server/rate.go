package server

import (
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// The reasons rate limits give (Levee-Reject).
const (
	reasonRate       = "rate"
	reasonClientRate = "client-rate"
)

// appKey is the app-wide limit's key in the app's store; client keys
// (header values, IP addresses) never contain a NUL byte.
const appKey = "\x00app"

// rateRule is one configured rate limit, composed when the config loads.
type rateRule struct {
	lim    ratelimit.Limit
	policy ratelimit.Policy
	reason string
	store  rateStore // the app's state of this limit (appRates)
}

// gcraLimit is a configured rate and burst (0: derived) as a GCRA limit;
// the zero Limit when the rate is off.
func gcraLimit(r config.Rate, burst int) ratelimit.Limit {
	if r == (config.Rate{}) {
		return ratelimit.Limit{}
	}
	return ratelimit.Limit{Interval: r.Interval(), Burst: config.EffectiveBurst(r, burst)}
}

func newRateRule(name, reason string, r config.Rate, burst int) *rateRule {
	if r == (config.Rate{}) {
		return nil
	}
	lim := gcraLimit(r, burst)
	policy, err := ratelimit.NewPolicy(name, lim, 0)
	if err != nil { // validated config: a broken invariant
		panic("server: a validated rate limit is invalid: " + err.Error())
	}
	return &rateRule{lim: lim, policy: policy, reason: reason}
}

// limitRate applies the app's rate limit and the client's, in an order that
// never spends one limit's budget on a request the other refuses: the app
// limit is only peeked before the client's is spent. It counts refusals.
// Both limits are scaled by the server's factor now (see scale.go).
func (rt *route) limitRate(client string, now time.Time) (refusal, bool) {
	f := loadFactor(rt.rateFactor)
	var appLim ratelimit.Limit
	var let refusal // a request let through: its shadowed reasons
	if rt.appRate != nil {
		appLim = scaleRate(rt.appRate.lim, f)
		if d := rt.appRate.store.AllowAt(appKey, appLim, now, 0); d.Remaining < 1 {
			ref, ok := rt.refuseRate(rt.appRate, rt.appRate.store.AllowAt(appKey, appLim, now, 1))
			if !ok {
				return ref, false
			}
			let.shadow |= ref.shadow
		}
	}
	if rt.clientRate != nil {
		if d := rt.clientRate.store.AllowAt(client, scaleRate(rt.clientRate.lim, f), now, 1); !d.Allowed {
			ref, ok := rt.refuseRate(rt.clientRate, d)
			if !ok {
				return ref, false
			}
			let.shadow |= ref.shadow
		}
	}
	if rt.appRate != nil && let.shadow&appRateShadow == 0 {
		if d := rt.appRate.store.AllowAt(appKey, appLim, now, 1); !d.Allowed {
			ref, ok := rt.refuseRate(rt.appRate, d)
			let.shadow |= ref.shadow
			if !ok {
				return ref, false
			}
		}
	}
	return let, true
}

// refuseRate is the refusal of rule's limit, counted; a shadowed rule's
// is counted as shadowed and lets the request through, as if the bucket
// had room (a refusal does not spend it, and neither does a shadowed one).
func (rt *route) refuseRate(rule *rateRule, d ratelimit.Decision) (refusal, bool) {
	if marks, ok := rt.shadows(rule.reason); ok {
		return refusal{shadow: marks}, true
	}
	rt.app.metrics.Rejected(rule.reason)
	return refusal{code: http.StatusTooManyRequests, reason: rule.reason,
		retryAfter: time.Duration(ratelimit.RetryAfterSeconds(d)) * time.Second, rate: rule, decision: d}, false
}

// setRateHeaders adds the IETF RateLimit fields of a rate refusal.
func setRateHeaders(set func(k, v string), ref refusal) {
	if ref.rate == nil {
		return
	}
	set("RateLimit-Policy", ref.rate.policy.Header())
	set("RateLimit", string(ref.rate.policy.AppendRateLimit(nil, ref.decision)))
}

// sweepRates drops idle client state every interval until done; owned by Serve.
func (s *Server) sweepRates(done <-chan struct{}, every time.Duration) {
	s.every(done, every, func() {
		now := s.clk.Now()
		s.mu.Lock()
		for _, a := range s.apps {
			a.rates.sweep(now)
		}
		s.mu.Unlock()
	})
}

// every calls fn every interval until done, on the server's clock.
func (s *Server) every(done <-chan struct{}, interval time.Duration, fn func()) {
	t := s.clk.NewTimer(interval)
	defer func() { t.Stop() }() // the timer current at exit
	for {
		select {
		case <-done:
			return
		case <-t.C():
			fn()
			t = s.clk.NewTimer(interval)
		}
	}
}
