package limits

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/trace"
)

// Counter counts a gate's refusals, shadowed refusals and queue waits
// (the proxy's observe.AppMetrics). It must not allocate: it is called on
// the refusal path.
type Counter interface {
	Rejected(reason string)
	Shadowed(reason string)
	QueueWait(d time.Duration)
}

// Gate is the admission of one app (the proxy) or one handler (the
// admission middleware): the `limits:` section applied to a request before
// it reaches the backend, in one order. Check applies what is known from
// the request's head (shape, rate, a declared body); Admit takes the
// concurrency slot. Its owner fills it when the config loads and does not
// change it after; it is then safe for concurrent use.
type Gate struct {
	AppRate    *Rule            // limits.rate; nil when off
	ClientRate *Rule            // limits.client.rate; nil when off
	RateFactor *atomic.Uint64   // the float64 bits rate limits are scaled by now; nil: 1
	ClientKey  clientkey.Source // limits.client.key
	Classes    Classifier       // limits.priority
	Shapes     Shapes           // body, header, URL, query and batch limits, per path
	Limiter    *admit.Limiter   // limits.concurrency and limits.queue
	Adaptive   *Adaptive        // nil for a static concurrency limit
	Count      Counter
	Clock      clock.Clock
	// The small fields together, so that a gate, one per app of a large
	// catalog, has no padding between them.
	Shadow    ShadowSet // limits.shadow: reasons counted, not refused
	FairShare bool      // limits.fair_share: tickets carry the client key
	// ReadClient: the owner reads Passed.Client itself (the proxy's
	// backend_limits), so Check reads the key even if no limit here does.
	ReadClient bool
}

// Request is what the gate reads of a request, from either engine (or
// net/http in the middleware). Methods return views that stay valid for
// the request.
type Request interface {
	Path() string
	// Target is the request-target as sent (url_length, query values).
	Target() string
	// Headers counts the header fields, Host included, and their bytes.
	Headers() (count, size int)
	// ContentLength is the declared body length; -1 when unknown (chunked).
	ContentLength() int64
	// ClientKey is the client key as a string that may be kept.
	ClientKey(k clientkey.Source) string
}

// Refusal is a request refused before any backend work. A zero Code means
// the client went away (or the server is shutting down) while it was
// queued: there is no one to answer.
type Refusal struct {
	Code       int
	Reason     string
	RetryAfter time.Duration
	Rate       *Rule              // set for a rate refusal: its RateLimit fields
	Decision   ratelimit.Decision // with Rate
	Reply      *reply.Reply       // the answer, when not reply.For(Reason)
	Shadow     ShadowSet          // when let through: what shadowed limits would have refused
}

// Sealed is the refusal of a request that found no slot at a sealed
// limiter (admit.ErrSealed): this levee has handed over to a new one. Its
// Code is 0, as for a request whose client left: the server answers it as
// one that came once the drain began (draining.go), which sends its
// client to the levee that serves now.
var Sealed = Refusal{Reason: reply.Draining}

// Answer is the reply of ref.
func (ref *Refusal) Answer() *reply.Reply {
	if ref.Reply != nil {
		return ref.Reply
	}
	return reply.For(ref.Reason)
}

// HTTP answers ref on a net/http response, RateLimit fields included.
func (ref *Refusal) HTTP(w http.ResponseWriter) {
	if ref.Rate != nil {
		ref.Rate.HTTPHeaders(w.Header(), ref.Decision)
	}
	ref.Answer().HTTP(w, ref.RetryAfter)
}

// Passed is what Check let through: the shape limits of the request's
// path, its client key (when a limit reads it) and what shadowed limits
// would have refused.
type Passed struct {
	Shape  *PathShape
	Client string
	Shadow ShadowSet
}

// Check applies the limits known from r's head, in order: the shape
// limits (target, query values, header count and bytes), the rate limits
// (the app's, then the client's), limits.body on the declared length. A
// violation of shape is returned as v, the others as ref; ok false means
// one of them refused r, counted, and the caller answers it. now is when
// the request arrived; tr records the stages (nil or off: not traced). It
// allocates nothing.
func Check[R Request](g *Gate, r R, now time.Time, tr *trace.Request) (p Passed, v *shape.Violation, ref Refusal, ok bool) {
	p.Shape = g.Shapes.ForPath(r.Path())
	count, size := r.Headers()
	tr.Mark(trace.StageShape, g.Clock)
	v, p.Shadow = g.checkShape(p.Shape, r.Target(), count, size)
	if v != nil {
		return p, v, Refusal{}, false
	}
	if g.NeedsClient() {
		p.Client = r.ClientKey(g.ClientKey)
	}
	tr.Mark(trace.StageRate, g.Clock)
	if ref, ok = g.limit(p.Client, r.ContentLength(), p.Shape.Body, now); !ok {
		return p, nil, ref, false
	}
	p.Shadow |= ref.Shadow
	return p, nil, Refusal{}, true
}

// Local reports whether Check decides in process, without a wait: each of
// the gate's rate rules keeps its buckets here (a cluster store may wait
// on Redis). Ground for running Check where nothing may block (the
// event loop).
func (g *Gate) Local() bool { return g.AppRate.local() && g.ClientRate.local() }

// NeedsClient reports whether a limit of the gate reads the client key.
func (g *Gate) NeedsClient() bool {
	return g.ReadClient || g.ClientRate != nil || g.FairShare || g.Classes.NeedsClient()
}

// checkShape applies the request-shape limits known before the body:
// target length, query values, header count and bytes. A violation is
// counted; the caller answers it. A request let through carries what
// shadowed limits would have refused (marks).
func (g *Gate) checkShape(sh *PathShape, target string, headerCount, headerBytes int) (v *shape.Violation, marks ShadowSet) {
	v = sh.Check.CheckTarget(target)
	if v == nil {
		v = sh.Check.CheckHeaders(headerCount, headerBytes)
	}
	if v != nil && g.Shadow != 0 {
		v, marks = g.shadowShape(sh, target, headerCount, headerBytes)
	}
	if v != nil {
		g.Count.Rejected(string(v.Reason))
	}
	return v, marks
}

// limit is the step before the body is read: the rate limits, then
// limits.body on the declared length (-1: unknown, then the body's reader
// enforces it). A request let through carries in its refusal's Shadow
// what shadowed limits would have refused.
func (g *Gate) limit(client string, contentLength, bodyLimit int64, now time.Time) (Refusal, bool) {
	var ref Refusal
	if g.AppRate != nil || g.ClientRate != nil {
		var ok bool
		if ref, ok = g.LimitRate(client, now); !ok {
			return ref, false
		}
	}
	if contentLength > bodyLimit {
		marks, ok := g.Shadows(reply.Body)
		if !ok {
			g.Count.Rejected(reply.Body)
			return Refusal{Code: http.StatusRequestEntityTooLarge, Reason: reply.Body}, false
		}
		ref.Shadow |= marks
	}
	return ref, true
}

// LimitRate applies the app's rate limit and the client's (Allow: the
// order that never spends one limit's budget on a request the other
// refuses), both scaled by the gate's factor now. It counts refusals.
func (g *Gate) LimitRate(client string, now time.Time) (Refusal, bool) {
	o := Allow(g.AppRate, g.ClientRate, client, loadFactor(g.RateFactor), now, g)
	if o.Refused != nil {
		g.Count.Rejected(o.Refused.Reason)
		return Refusal{Code: http.StatusTooManyRequests, Reason: o.Refused.Reason,
			RetryAfter: RetryAfter(o.Decision), Rate: o.Refused, Decision: o.Decision}, false
	}
	var let Refusal // let through: its shadowed reasons
	if o.ShadowedApp {
		let.Shadow |= appRateShadow
	}
	if o.ShadowedClient {
		let.Shadow |= clientRateShadow
	}
	return let, true
}

// Shadowed reports whether rule's refusal is shadowed by g, counting it
// (Shadower).
func (g *Gate) Shadowed(rule *Rule) bool {
	_, ok := g.Shadows(rule.Reason)
	return ok
}

var _ Shadower = (*Gate)(nil)

func loadFactor(p *atomic.Uint64) float64 {
	if p == nil {
		return 1
	}
	return math.Float64frombits(p.Load())
}

// Ticket is what a request for path from client asks the limiter for: its
// priority class and, with fair sharing, who it is.
func (g *Gate) Ticket(path, client string) admit.Ticket {
	t := admit.Ticket{Class: g.Classes.Class(path, client)}
	if g.FairShare {
		t.Client = client
	}
	return t
}

// Admit takes the gate's concurrency slot for t, waiting in its queue at
// most until ctx ends (the wait of a request that queued is counted and
// traced). ok means the caller holds the slot and must release it once the
// response is done (admit.Release with the status: an adaptive limit
// samples it); otherwise the refusal is counted and says what to answer
// (Code 0: no one to answer). On the common path it allocates nothing.
func (g *Gate) Admit(ctx context.Context, t admit.Ticket, tr *trace.Request) (admit.Releaser, Refusal, bool) {
	waited, err := g.Limiter.AcquireWait(ctx, t)
	return g.admitted(t, waited, err, tr)
}

// Begin is Admit up to its wait in the queue, for a caller that must not
// wait (the event loop): it takes a free slot or a place in the queue
// (admit.Limiter.Begin), to be ended by Finish or p.Cancel(t). ok false:
// refused, counted, and ref says what to answer (Code 0: sealed, see
// Sealed).
func (g *Gate) Begin(t admit.Ticket) (p admit.Pending, ref Refusal, ok bool) {
	p, err := g.Limiter.Begin(t)
	if err != nil {
		return p, g.refusal(err), false
	}
	return p, Refusal{}, true
}

// Finish is Admit from where Begin left it: the wait in the queue, if
// any, until ctx ends, then the slot.
func (g *Gate) Finish(ctx context.Context, t admit.Ticket, p admit.Pending, tr *trace.Request) (admit.Releaser, Refusal, bool) {
	waited, err := p.Wait(ctx)
	return g.admitted(t, waited, err, tr)
}

// admitted is Admit's answer once the limiter's is known: err its
// refusal, else the slot of t, which waited for it in the queue.
func (g *Gate) admitted(t admit.Ticket, waited time.Duration, err error, tr *trace.Request) (admit.Releaser, Refusal, bool) {
	if err != nil {
		return nil, g.refusal(err), false
	}
	if waited > 0 {
		g.Count.QueueWait(waited)
		tr.Waited(waited)
	}
	tr.Mark(trace.StageAdmitted, g.Clock)
	switch {
	case g.Adaptive != nil:
		return &adaptiveSlot{a: g.Adaptive, t: t, clk: g.Clock,
			start: g.Clock.Now(), inflight: g.Limiter.InFlight()}, Refusal{}, true
	case t.Client != "":
		return &ticketSlot{l: g.Limiter, t: t}, Refusal{}, true
	}
	return g.Limiter, Refusal{}, true // no allocation on the common path
}

// refusal is the answer to the limiter's err, counted.
func (g *Gate) refusal(err error) Refusal {
	if rej, ok := AsRejection(err); ok {
		g.Count.Rejected(string(rej.Reason))
		return Refusal{Code: http.StatusServiceUnavailable, Reason: string(rej.Reason), RetryAfter: rej.RetryAfter}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return g.DeadlinePassed() // the request's deadline, not its client's going
	}
	if err == admit.ErrSealed {
		return Sealed
	}
	return Refusal{}
}

// AsRejection finds the *admit.Rejection in err. Acquire returns it
// unwrapped, and the type assertion then spares errors.As's allocation.
func AsRejection(err error) (*admit.Rejection, bool) {
	if rej, ok := err.(*admit.Rejection); ok {
		return rej, true
	}
	var rej *admit.Rejection
	ok := errors.As(err, &rej)
	return rej, ok
}
