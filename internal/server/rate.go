package server

import (
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

// The reasons rate limits give (Levee-Reject): package limits' own.
const (
	reasonRate       = limits.ReasonRate
	reasonClientRate = limits.ReasonClientRate
)

// rateRule is one configured rate limit (package limits, shared with the
// admission middleware).
type rateRule = limits.Rule

// limitRate applies the app's rate limit and the client's (limits.Allow:
// the order that never spends one limit's budget on a request the other
// refuses). It counts refusals. Both limits are scaled by the server's
// factor now (see scale.go).
func (rt *route) limitRate(client string, now time.Time) (refusal, bool) {
	o := limits.Allow(rt.appRate, rt.clientRate, client, loadFactor(rt.rateFactor), now, rt)
	if o.Refused != nil {
		return rt.refuseRate(o.Refused, o.Decision), false
	}
	var let refusal // let through: its shadowed reasons
	if o.ShadowedApp {
		let.shadow |= appRateShadow
	}
	if o.ShadowedClient {
		let.shadow |= clientRateShadow
	}
	return let, true
}

// Shadowed reports whether rule's refusal is shadowed on rt, counting it
// (limits.Shadower).
func (rt *route) Shadowed(rule *rateRule) bool {
	_, ok := rt.shadows(rule.Reason)
	return ok
}

var _ limits.Shadower = (*route)(nil)

// refuseRate is the refusal of rule's limit, counted.
func (rt *route) refuseRate(rule *rateRule, d ratelimit.Decision) refusal {
	rt.app.metrics.Rejected(rule.Reason)
	return refusal{code: http.StatusTooManyRequests, reason: rule.Reason,
		retryAfter: limits.RetryAfter(d), rate: rule, decision: d}
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
