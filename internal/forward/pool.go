package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/spill"
	"github.com/valyala/fasthttp"
)

// Options build a Pool.
type Options struct {
	App      string
	Backends []config.Backend
	// Conns are the backends' connection pools (see Upstreams): Conns[i]
	// is Backends[i]'s; required.
	Conns    []*Upstream
	Trust    Trust
	ErrorLog *observe.ErrorLog
	// Metrics are the app's metrics (backend and retry counters); required.
	Metrics *observe.AppMetrics
	// Upstream bounds the dial and the response headers of upgrades (fasthttp).
	Upstream config.Upstream
	// OnReject counts a request refused while its body streamed (reason as
	// in Levee-Reject); nil counts nothing.
	OnReject func(reason string)
	// Balance is the app's balancing policy.
	Balance config.Balance
	// Prev is the backend state of the app's previous pool (nil at first):
	// backends that stay keep their in-flight counts, latency and health.
	Prev *balance.Set
	// Rand drives p2c's choices; nil uses math/rand/v2. For tests.
	Rand func() uint64
	// Outcomes, if set, learns from every finished request (passive
	// outlier ejection).
	Outcomes OutcomeObserver
	// Bandwidth paces request and response bytes; nil paces nothing.
	Bandwidth *bandwidth.Limiter
	// Buffers is the budget response buffers are charged to; ResponseBuffer
	// the largest response (by Content-Length) read whole before it is
	// passed on (0, or a nil Buffers: none).
	Buffers        *membuf.Budget
	ResponseBuffer int64
	// Spill holds on disk, past its first ResponseBuffer bytes, a response
	// longer than ResponseBuffer and at most ResponseSpill bytes long (by
	// Content-Length), so that its slot is given back when the backend is
	// done; nil or 0: none, such responses stream.
	Spill         *spill.Budget
	ResponseSpill int64
	// MinRate and WriteTimeout (server.min_rate, server.write_timeout)
	// bound how slowly a client may read a response.
	MinRate      netlimit.MinRate
	WriteTimeout time.Duration
	// Retry says which failed requests are tried again on another backend.
	// The zero value retries nothing.
	Retry config.Retry
	// Clock times the retry budget's window; nil is the real clock.
	Clock clock.Clock
	// Deadline is apps.NAME.upstream.deadline (nil: its defaults): the
	// time the app's requests are given, which their backends are told.
	Deadline *config.UpstreamDeadline
}

// OutcomeObserver learns from each finished request; *health.Ejector is one.
type OutcomeObserver interface {
	Observe(set *balance.Set, i int, o balance.Outcome, now time.Time)
}

// Pool forwards one app's requests to its backends. Safe for concurrent use.
type Pool struct {
	app      string
	backends []*backend
	bal      balance.Balancer
	keyless  balance.Balancer   // for hash: requests without a key
	outcomes OutcomeObserver    // may be nil
	bw       *bandwidth.Limiter // may be nil
	key      clientkey.Source
	errlog   *observe.ErrorLog
	trust    Trust
	// Of upstream's settings (the pool has the rest): the wait for an
	// upgrade's answer.
	headerTimeout time.Duration
	onReject      func(reason string)
	retry         retryPolicy
	clk           clock.Clock
	// Response buffering and client pacing (see Options).
	buffers      *membuf.Budget
	respBuffer   int64         // -1: none
	spill        *spill.Budget // nil: none
	respSpill    int64
	minRate      netlimit.MinRate
	writeTimeout time.Duration
	deadline     *config.UpstreamDeadline // nil: the defaults
}

type backend struct {
	addr     string
	up       *Upstream // the connection pool, shared with every app at addr
	requests *observe.Counter
}

// NewPool returns a Pool over o.Backends, balanced by o.Balance.
func NewPool(o Options) *Pool {
	specs := make([]balance.Spec, len(o.Backends))
	for i, b := range o.Backends {
		specs[i] = balance.Spec{ID: b.Addr, Weight: b.Weight}
	}
	set := balance.NewSet(specs, o.Prev, time.Now())
	p := &Pool{app: o.App, errlog: o.ErrorLog, trust: o.Trust,
		headerTimeout: o.Upstream.ResponseHeaderTimeout.D(),
		onReject:      o.OnReject, outcomes: o.Outcomes, bw: o.Bandwidth,
		buffers: o.Buffers, minRate: o.MinRate, writeTimeout: o.WriteTimeout,
		spill: o.Spill, respSpill: o.ResponseSpill, deadline: o.Deadline}
	if o.Buffers != nil {
		p.respBuffer = o.ResponseBuffer
	} else {
		p.respBuffer = -1 // nothing is read ahead
	}
	switch o.Balance.Policy {
	case config.BalanceRoundRobin, config.BalanceWeighted:
		p.bal = balance.NewRoundRobinSet(set)
	case config.BalanceHash:
		h, err := balance.NewHash(set, o.Balance.Hash.Load)
		if err != nil { // validated config: a broken invariant
			panic(fmt.Sprintf("forward: %v", err))
		}
		p.bal, p.keyless = h, balance.NewP2C(set, o.Rand)
		p.key = clientkey.New(o.Balance.Hash.Key)
	default:
		p.bal = balance.NewP2C(set, o.Rand)
	}
	if p.onReject == nil {
		p.onReject = func(string) {}
	}
	p.clk = o.Clock
	if p.clk == nil {
		p.clk = clock.Real{}
	}
	p.retry = newRetryPolicy(o.Retry, len(o.Backends), o.Metrics)
	p.backends = make([]*backend, len(o.Backends))
	for i, b := range o.Backends {
		p.backends[i] = &backend{addr: b.Addr, requests: o.Metrics.BackendCounter(b.Addr),
			up: o.Conns[i]}
	}
	return p
}

// done reports a finished request to the balancer and the outcome observer.
func (p *Pool) done(bal balance.Balancer, i int, o balance.Outcome, start time.Time) {
	now := time.Now()
	bal.Done(i, o, now.Sub(start), now)
	if p.outcomes != nil {
		p.outcomes.Observe(bal.Set(), i, o, now)
	}
}

// reasonNoBackend: every backend of the app is unhealthy or ejected.
const reasonNoBackend = reply.NoBackend

// Deadline is the app's upstream.deadline; nil: its defaults.
func (p *Pool) Deadline() *config.UpstreamDeadline { return p.deadline }

// Set returns the pool's backend state, to carry into the next pool on reload.
func (p *Pool) Set() *balance.Set { return p.bal.Set() }

// balancer is the policy for a request with hash key key.
func (p *Pool) balancer(key string) balance.Balancer {
	if p.keyless != nil && key == "" {
		return p.keyless
	}
	return p.bal
}

// outcomeOf classifies a response status for the balancer.
func outcomeOf(code int) balance.Outcome {
	switch {
	case code == 0:
		return balance.Canceled
	case code >= 500:
		return balance.Failed
	}
	return balance.OK
}

// reasonBandwidth: a transfer cut after waiting limits.bandwidth.max_delay.
const reasonBandwidth = reply.Bandwidth

// BadBodyError is a client's request body that could not be read: broken
// chunked framing, or a connection that failed mid-body.
type BadBodyError struct{ Err error }

func (e *BadBodyError) Error() string { return "forward: reading the request body: " + e.Err.Error() }
func (e *BadBodyError) Unwrap() error { return e.Err }

// backendTimedOut reports a backend that did not answer in time, or a
// request that waited too long for one of its connections: a 504.
func backendTimedOut(err error) bool {
	return errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns) || isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// buffers recycle httpDown's copy buffers: one 32 KiB allocation per
// response would otherwise dominate the proxy's garbage.
var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// tooSlow counts and logs a request body cut off at server.min_rate.
func (p *Pool) tooSlow(err error) {
	p.onReject(reply.MinRate)
	p.logTooSlow("request", -1, "", err)
}
