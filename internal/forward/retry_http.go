package forward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
)

// Retries on the net/http engine. ServeHTTP loops over tries, each through
// the chosen backend's ReverseProxy; ReverseProxy's ModifyResponse (a listed
// status) and ErrorHandler (a connect error) decide a retry and then write
// nothing, so the next try answers the client. This keeps one response
// writer, ReverseProxy's header, trailer, flush and upgrade handling, and
// the balancer's per-try bookkeeping in one place. A RoundTripper wrapper
// could retry below ReverseProxy, but would need the same per-request state
// to pick a different backend and to report each try to the balancer.
// The state reaches both hooks through the outgoing request's context
// (ReverseProxy clones the incoming one).

// attemptKey is the context key of a request's *attempt.
type attemptKey struct{}

// errRetried is ModifyResponse's error for a response dropped for a retry.
var errRetried = errors.New("forward: retried on another backend")

// attempt is one net/http request's tries so far.
type attempt struct {
	bal   balance.Balancer // of the current try
	i     int
	start time.Time
	tried tries
	// idempotent and replayable (no body) allow retrying a listed status.
	idempotent, replayable bool
	// retry is set when the current try failed and next was picked.
	retry   bool
	nextBal balance.Balancer
	next    int
}

// serveRetrying is ServeHTTP for an app whose requests may be retried;
// backend i was picked by bal at start.
func (p *Pool) serveRetrying(w http.ResponseWriter, r *http.Request, bal balance.Balancer, i int, start time.Time) {
	p.retry.budget.Request(p.clk.Now())
	a := &attempt{bal: bal, i: i, start: start, idempotent: isIdempotentMethod(r.Method),
		// A server request has no GetBody: only an empty body can be sent again.
		replayable: r.ContentLength == 0}
	a.tried.add(i)
	r = r.WithContext(context.WithValue(r.Context(), attemptKey{}, a))
	defer func() { // deferred: ReverseProxy aborts with a panic mid-body
		p.done(a.bal, a.i, httpOutcome(w, r), a.start)
	}()
	for {
		be := p.backends[a.i]
		be.requests.Inc()
		a.retry = false
		p.proxy(be).ServeHTTP(w, r)
		if !a.retry {
			return
		}
		p.done(a.bal, a.i, balance.Failed, a.start)
		a.bal, a.i, a.start = a.nextBal, a.next, time.Now()
		a.tried.add(a.i)
	}
}

// again decides a retry after a failed try, picking its backend.
func (p *Pool) again(a *attempt) bool {
	bal, i, ok := p.nextTry(a.bal, &a.tried, time.Now())
	if ok {
		a.retry, a.nextBal, a.next = true, bal, i
	}
	return ok
}

// retryStatus is ReverseProxy's ModifyResponse: a listed status to an
// idempotent request without a body is dropped for a retry, if one is
// allowed; otherwise it passes through.
func (p *Pool) retryStatus(res *http.Response) error {
	a, _ := res.Request.Context().Value(attemptKey{}).(*attempt)
	if a == nil || !p.retry.on(res.StatusCode) || !a.idempotent || !a.replayable || !p.again(a) {
		return nil
	}
	// Read a short error body to its end, so its connection can be reused.
	io.CopyN(io.Discard, res.Body, 4<<10)
	return errRetried
}

// retryError reports, in ReverseProxy's ErrorHandler, a try that will be
// retried: one whose response retryStatus dropped, or a connect error
// (nothing of the request was sent, so any method may be sent again).
func (p *Pool) retryError(r *http.Request, err error) bool {
	a, _ := r.Context().Value(attemptKey{}).(*attempt)
	switch {
	case a == nil:
		return false
	case errors.Is(err, errRetried):
		return true
	}
	return p.retry.onConnect && isConnectError(err) && p.again(a)
}
