package admission

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/topk"
)

// Limits are the limits of one handler, as levee's `limits:` section of
// an app writes them. Make them with ParseLimits; the zero Limits are not
// usable (NewGate and Middleware panic). A Limits value is read-only and
// may be used for any number of gates, each with its own state.
type Limits struct {
	l  config.Limits
	ok bool
}

// ParseLimits decodes and validates yaml as a `limits:` section of levee's
// config: the same keys, defaults and checks, with errors that name the
// field path (limits.rate: ...). Empty yaml is levee's default limits.
// limits.bandwidth is refused: it paces a proxy's bytes, which a handler
// does not own. limits.request_buffer and limits.response_buffer are the
// proxy's buffer sizes and mean nothing here; they are checked, not used.
func ParseLimits(yaml []byte) (Limits, error) {
	l, err := config.ParseLimits(yaml)
	if err != nil {
		return Limits{}, err
	}
	if l.Bandwidth.Rate != 0 {
		return Limits{}, config.Errors{{Path: "limits.bandwidth",
			Msg: "not applied by the admission middleware: it paces the bytes a proxy relays; leave it to levee"}}
	}
	return Limits{l: l, ok: true}, nil
}

// A Gate is Limits in force: their state (rate buckets, the concurrency
// limit and its queue, the adaptive limit, the top clients) shared by every
// handler it wraps. A Gate is safe for concurrent use, starts no goroutine
// and needs no Close. Make one with NewGate; the zero Gate is not usable.
type Gate struct {
	h *limits.Handler
}

// NewGate returns a Gate of l. It panics if l was not made by ParseLimits.
func NewGate(l Limits) *Gate {
	if !l.ok {
		panic("admission: NewGate with zero Limits; make them with ParseLimits")
	}
	return &Gate{h: limits.NewHandler("admission", l.l, nil, nil)}
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
	return g.h.With(next)
}

// Middleware returns NewGate(l).Wrap: a middleware whose wrapped handlers
// share one set of limits and their state. Each call makes new state.
func Middleware(l Limits) func(http.Handler) http.Handler { return NewGate(l).Wrap }

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
// request waits on.
func (g *Gate) Stats() Stats {
	c := g.counts()
	s := Stats{Running: c.InFlight, Queued: c.Queued, Limit: c.Limit, Waited: g.h.Counts().Waited(),
		Rejected: map[Reason]uint64{}, Shadowed: map[Reason]uint64{}}
	for r, n := range c.Rejected {
		s.Rejected[Reason(r)] = n
	}
	for r, n := range c.Shadowed {
		s.Shadowed[Reason(r)] = n
	}
	return s
}

// counts is what Stats and Collector report.
func (g *Gate) counts() observe.GateCounts {
	l := g.h.Limiter()
	rej, sh := g.h.Counts().Snapshot()
	return observe.GateCounts{InFlight: l.InFlight(), Queued: l.Queued(), Limit: l.Limits().Concurrency,
		Rejected: rej, Shadowed: sh}
}

// Collector returns a Prometheus collector of the gate under levee's own
// metric names, labelled app="name": levee_inflight, levee_queue_length,
// levee_concurrency_limit, and levee_rejected_total and
// levee_shadow_rejected_total by reason, so a dashboard or an alert written
// for levee reads the service's gate unchanged. Register it once per gate:
//
//	prometheus.MustRegister(gate.Collector("checkout"))
func (g *Gate) Collector(name string) prometheus.Collector {
	return observe.GateCollector(name, g.counts)
}

// TopReport is the heaviest clients of one measure over one window, as
// levee's admin API reports an app's (GET /api/apps/{app}/top): Space-Saving
// summaries of limits.client.top_k clients, so a listed client's Count is
// an upper bound, at most ErrorBound (its own Err) over the truth.
type TopReport = topk.Report

// TopShare is one client of a TopReport.
type TopShare = topk.Share

// Top returns the heaviest clients by a measure ("requests", "rejected",
// "bytes" or "items": request and response body bytes, batch items) over a
// window ("10s", "1m" or "10m"). A client is its limits.client.key when
// that is a header the request has, else the peer's address. It returns an
// error for an unknown measure or window, or when limits.client.top_k is 0.
func (g *Gate) Top(by, window string) (TopReport, error) {
	d, w, err := topk.Index(by, window)
	if err != nil {
		return TopReport{}, fmt.Errorf("admission: top: %w", err)
	}
	top := g.h.Top()
	if top == nil {
		return TopReport{}, fmt.Errorf("admission: top clients are off (limits.client.top_k: 0)")
	}
	return top.Report(d, w, 0, 0, g.h.Now()), nil
}

// TopHandler serves Top as JSON, as levee's admin API does: GET
// ?by=requests&window=10s (the defaults), the report or {"error": "..."}
// with 400. Mount it where only operators reach it: client keys are
// what the clients sent.
func (g *Gate) TopHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		by, window := q.Get("by"), q.Get("window")
		if by == "" {
			by = topk.ByRequests
		}
		if window == "" {
			window = topk.WindowNames[0]
		}
		rep, err := g.Top(by, window)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}
