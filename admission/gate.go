package admission

import (
	"context"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/deadline"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
)

// A Gate is Limits in force: their state (rate buckets, the concurrency
// limit and its queue, the adaptive limit, the top clients) shared by every
// handler it wraps. A Gate is safe for concurrent use, starts no goroutine
// and needs no Close. Make one with NewGate; the zero Gate is not usable.
type Gate struct {
	h *limits.Handler
}

// NewGate returns a Gate of l, or an error naming each field of l that
// levee's rules refuse (limits.queue.max_len: must be ...).
func NewGate(l Limits) (*Gate, error) {
	c, err := l.config()
	if err != nil {
		return nil, err
	}
	return &Gate{h: limitsconf.Handler("admission", c, nil, bodyError)}, nil
}

// Wrap returns next behind the gate's limits, applied in levee's order and
// with levee's own code (the proxy's gate, internal/limits):
//
//  1. the request's shape: limits.url_length, limits.query_values,
//     limits.header_count, limits.header_bytes (414, 431);
//  2. limits.rate, then limits.client.rate by limits.client.key (429, with
//     RateLimit and RateLimit-Policy);
//  3. limits.body on a declared Content-Length (413);
//  4. the concurrency limit (a number, or adaptive: gradient, which learns
//     from the handler's latency and 5xx answers) and its queue
//     (limits.queue), with limits.priority and limits.fair_share (503:
//     queue-full, queue-timeout, shed, client-share); a request waits
//     in the queue at most limits.queue.max_wait, or until its client goes;
//  5. while the handler reads the body: limits.body without a declared
//     length, and limits.batch (413, 422, 400).
//
// limits.per_path chooses the shape limits (1, 3, 5) by the longest path
// prefix, as in levee. A limit named in limits.shadow refuses nothing: it
// is counted (Stats) and the request goes on with a Levee-Shadow header
// naming it, as levee sends it to a backend (a client's own is dropped).
//
// A request from levee carries the time it has left (Levee-Deadline): the
// request's context gets that deadline, so the wait in step 4 ends at it
// (504, deadline), a Budget task under it is never started once it has
// passed, and next can stop work whose client will not wait for it.
//
// A request refused in steps 1 to 4 gets exactly the answer the levee proxy
// gives (status, Levee-Reject, Retry-After, RateLimit fields, body) and
// never reaches next; a client that goes away while queued gets none. A
// body refused in step 5 fails next's read with a *Rejection of the limit's
// Reason, and the gate answers that refusal in place of whatever next then
// writes, as levee answers a body cut off while it streams; if next wrote
// its response before reading the body through, its response stands.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	if g == nil || g.h == nil {
		panic("admission: Wrap on a nil or zero Gate; make one with NewGate")
	}
	h := g.h.With(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := leveeDeadline(r.Header); ok {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// leveeDeadline is the time a request has left by its Levee-Deadline
// fields (levee's, in front; the smallest, if several).
func leveeDeadline(h http.Header) (d time.Duration, ok bool) {
	for _, v := range h[deadline.Header] {
		if vd, vok := deadline.ParseMillis(v); vok && (!ok || vd < d) {
			d, ok = vd, true
		}
	}
	return d, ok
}

// Stats are what a gate has done since it was made.
type Stats struct {
	// Running is the requests holding a concurrency slot now; Queued, those
	// waiting for one; Limit, the concurrency limit in force (an adaptive
	// limit's current value).
	Running, Queued, Limit int
	// Rejected and Shadowed count refusals and shadowed refusals by
	// reason (Levee-Reject's words); reasons that never happened are absent.
	Rejected, Shadowed map[Reason]uint64
	// Waited counts the requests that waited in the queue for their slot.
	Waited uint64
}

// Stats returns the gate's counts now. It allocates; it takes no lock a
// request waits on. Package admissionprom exports them to Prometheus.
func (g *Gate) Stats() Stats {
	l := g.h.Limiter()
	rej, sh := g.h.Counts().Snapshot()
	s := Stats{Running: l.InFlight(), Queued: l.Queued(), Limit: l.Limits().Concurrency,
		Waited: g.h.Counts().Waited(), Rejected: make(map[Reason]uint64, len(rej)), Shadowed: make(map[Reason]uint64, len(sh))}
	for r, n := range rej {
		s.Rejected[Reason(r)] = n
	}
	for r, n := range sh {
		s.Shadowed[Reason(r)] = n
	}
	return s
}
