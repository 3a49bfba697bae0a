package forward

import (
	"errors"
	"net"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/valyala/fasthttp"
)

// retryPolicy is an app's retry.* config with its budget and counters.
// The zero value retries nothing.
type retryPolicy struct {
	attempts  int  // tries per request, the first included
	onConnect bool // retry connect errors
	statuses  [3]bool
	budget    *Budget // nil unless a request can be retried (attempts > 1, backends > 1)
	// retries and exhausted are m's counters, made with the budget: only
	// a retry within it or refused by it counts.
	retries   *observe.Counter
	exhausted *observe.Counter
}

// newRetryPolicy is r for a pool of n backends (one cannot retry), its
// counters m's.
func newRetryPolicy(r config.Retry, n int, m *observe.AppMetrics) retryPolicy {
	rp := retryPolicy{attempts: max(r.Attempts, 1)}
	for _, on := range r.On {
		switch on {
		case config.RetryConnect:
			rp.onConnect = true
		case "502", "503", "504":
			rp.statuses[on[2]-'2'] = true
		}
	}
	if r.Budget == 0 {
		rp.attempts = 1
	}
	if rp.attempts > 1 && n > 1 {
		rp.budget = NewBudget(int(r.Budget), r.MinPerWindow)
		rp.retries, rp.exhausted = m.RetryCounters()
	}
	return rp
}

// on reports whether code is a listed status.
func (rp *retryPolicy) on(code int) bool {
	return code >= 502 && code <= 504 && rp.statuses[code-502]
}

// enabled reports whether a request to a pool of n backends may be retried at all.
func (rp *retryPolicy) enabled(n int) bool {
	return rp.attempts > 1 && n > 1 && (rp.onConnect || rp.statuses != [3]bool{})
}

// isConnectError reports a failure to open a connection to the backend
// (refused, unreachable, dial timeout): nothing of the request was sent.
func isConnectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, fasthttp.ErrDialTimeout)
}

// isIdempotentMethod reports a method that may be sent twice (RFC 9110 §9.2.2).
func isIdempotentMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// tries are the backends one request has tried, at most config.MaxRetryAttempts.
type tries struct {
	n  int
	ix [config.MaxRetryAttempts]int
}

func (t *tries) add(i int) { t.ix[t.n] = i; t.n++ }

func (t *tries) has(i int) bool {
	for _, j := range t.ix[:t.n] {
		if j == i {
			return true
		}
	}
	return false
}

// retryBalancer is the policy that picks a retry's backend: for hash, the
// keyless one (p2c), since the key's own choice is the backend that failed.
func (p *Pool) retryBalancer(bal balance.Balancer) balance.Balancer {
	if p.keyless != nil {
		return p.keyless
	}
	return bal
}

// nextTry decides a retry after a failed try of a request that has tried
// t, and picks its backend: another healthy one, not tried yet, within the
// budget. The failed try must still be counted in flight, so that p2c sees
// it loaded. It returns the balancer and index picked (which the caller
// must Done), or ok false with nothing picked. now is the balancer's time;
// the budget reads the pool's clock.
//
// The balancer is asked again up to Len times; a pick of a backend already
// tried is handed back at once as Canceled (it leaves the in-flight count;
// its request count, which the distribution statistics read, keeps it).
func (p *Pool) nextTry(bal balance.Balancer, t *tries, now time.Time) (balance.Balancer, int, bool) {
	if t.n >= p.retry.attempts {
		return nil, balance.NoBackend, false
	}
	bal = p.retryBalancer(bal)
	for range bal.Set().Len() {
		i := bal.Pick("", now)
		if i == balance.NoBackend {
			return nil, i, false
		}
		if !t.has(i) {
			if !p.retry.budget.Retry(p.clk.Now()) {
				bal.Done(i, balance.Canceled, 0, now)
				p.retry.exhausted.Inc()
				return nil, balance.NoBackend, false
			}
			p.retry.retries.Inc()
			return bal, i, true
		}
		bal.Done(i, balance.Canceled, 0, now)
	}
	return nil, balance.NoBackend, false
}
