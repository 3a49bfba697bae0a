package limits

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/forward"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
)

// The replies of the limits applied here, in package reply's one table.
func init() {
	for _, r := range []admit.Reason{admit.QueueFull, admit.QueueTimeout, admit.Shed, admit.ClientShare} {
		reply.Register(reply.Reply{Status: http.StatusServiceUnavailable, Reason: string(r)})
	}
	for _, r := range []string{ReasonRate, ReasonClientRate} {
		reply.Register(reply.Reply{Status: http.StatusTooManyRequests, Reason: r})
	}
}

// Admit is the concurrency limit and queue of validated limits.
func Admit(l config.Limits) admit.Limits {
	return admit.Limits{
		Concurrency: l.Concurrency.Limit,
		MaxLen:      l.Queue.MaxLen,
		MaxWait:     l.Queue.MaxWait.D(),
		Target:      l.Queue.Target.D(),
		Interval:    l.Queue.Interval.D(),
	}
}

// NewStore returns an in-process rate store of maxKeys keys (validated).
func NewStore(maxKeys int) *ratelimit.LocalStore {
	st, err := ratelimit.NewLocalStore(ratelimit.Options{MaxKeys: maxKeys})
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("limits: rate store: %v", err))
	}
	return st
}

// Handler applies validated limits to the requests of a net/http handler,
// in the proxy's order (rate, limits.body on the declared length,
// concurrency and queue with priorities and fair share), and refuses as
// the proxy's net/http engine does, from package reply. It is safe for
// concurrent use; it starts no goroutine.
type Handler struct {
	next       http.Handler
	clk        clock.Clock
	limiter    *admit.Limiter
	appRate    *Rule
	clientRate *Rule
	clientKey  forward.KeySource
	classes    Classifier
	fairShare  bool
	body       int64
}

// NewHandler returns next behind l, on clk (nil: the real clock); name
// names its RateLimit-Policy, as an app's name does in the proxy.
func NewHandler(name string, l config.Limits, clk clock.Clock, next http.Handler) *Handler {
	if clk == nil {
		clk = clock.Real{}
	}
	h := &Handler{next: next, clk: clk, limiter: admit.NewLimiter(Admit(l), clk),
		appRate:    NewRule(name, ReasonRate, l.Rate, l.Burst),
		clientRate: NewRule(name+"-client", ReasonClientRate, l.Client.Rate, l.Client.Burst),
		clientKey:  forward.NewKeySource(l.Client.Key), classes: NewClassifier(l.Priority),
		fairShare: l.FairShare, body: int64(l.Body)}
	if h.appRate != nil {
		h.appRate.Store = NewStore(1)
	}
	if h.clientRate != nil {
		h.clientRate.Store = NewStore(l.Client.MaxKeys)
	}
	return h
}

// noShadow: the handler refuses on every limit (limits.shadow is the
// proxy's alone).
type noShadow struct{}

func (noShadow) Shadowed(*Rule) bool { return false }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := h.clk.Now()
	var client string
	if h.clientRate != nil || h.fairShare || h.classes.NeedsClient() {
		client = h.clientKey.HTTP(r)
	}
	if h.appRate != nil || h.clientRate != nil {
		if o := Allow(h.appRate, h.clientRate, client, 1, now, noShadow{}); o.Refused != nil {
			o.Refused.HTTPHeaders(w.Header(), o.Decision)
			reply.For(o.Refused.Reason).HTTP(w, RetryAfter(o.Decision))
			return
		}
	}
	if r.ContentLength > h.body {
		reply.BodyReply.HTTP(w, 0)
		return
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength < 0 {
		r.Body = http.MaxBytesReader(w, r.Body, h.body)
	}
	t := admit.Ticket{Class: h.classes.Class(r.URL.Path, client)}
	if h.fairShare {
		t.Client = client
	}
	if _, err := h.limiter.AcquireWait(r.Context(), t); err != nil {
		var rej *admit.Rejection
		if errors.As(err, &rej) {
			reply.For(string(rej.Reason)).HTTP(w, rej.RetryAfter)
		}
		return // the client went away: no one to answer
	}
	defer h.limiter.ReleaseFor(t)
	h.next.ServeHTTP(w, r)
}

// Limiter is the handler's concurrency limiter (for its gauges).
func (h *Handler) Limiter() *admit.Limiter { return h.limiter }

// With returns a handler of next sharing h's limits and their state.
func (h *Handler) With(next http.Handler) *Handler {
	c := *h
	c.next = next
	return &c
}
