package trace

import "time"

// Stage is a step of the request path that a span records as an event,
// at the moment named.
type Stage uint8

const (
	StageShape         Stage = iota // the shape limits were checked
	StageRate                       // the rate limits (and the declared length) were checked
	StageBodyRead                   // the read of the body ahead of admission began (requests with a body)
	StageAdmitted                   // the concurrency slot was taken ("queued" is when its wait began)
	StageBackendLimits              // backend_limits was asked for its slot (apps with backend_limits)
	StageForward                    // the request went to balance and forward
	numStages
)

// stageNames are the span events' names, by Stage.
var stageNames = [numStages]string{"shape", "rate", "body_read", "admitted", "backend_limits", "forward"}

// eventQueued is the event of a wait for a slot, before StageAdmitted.
const eventQueued = "queued"

// Clock is what a Request reads the time from; clock.Clock is one.
type Clock interface{ Now() time.Time }

// Incoming is the trace context a client sent: how many traceparent
// fields, the value when there was one, and its tracestate checked.
type Incoming struct {
	Traceparent string
	Count       int
	State       TracestateCheck
}

// Request is the trace state of one request, held inline by the engine's
// pooled exchange: its zero value (and a nil *Request) is tracing off, on
// which every method is a no-op. Not safe for concurrent use.
type Request struct {
	on, sampled, remote bool
	dropState           bool // the client's tracestate must not be passed on
	sc                  SpanContext
	parent              SpanID
	start               int64
	marks               [numStages]int64 // 0: the stage did not run
	waited              time.Duration
	tp                  [TraceparentLen]byte
}

// Begin starts tracing a request that arrived at now with in: its own
// span id, the client's trace id when in holds one valid traceparent (more
// than one is invalid, as the spec says), else a new trace; sampled by s.
func (r *Request) Begin(s Sampler, ids IDs, now time.Time, in *Incoming) {
	var parent SpanContext
	ok := false
	if in.Count == 1 {
		parent, ok = ParseTraceparent(in.Traceparent)
	}
	*r = Request{on: true, remote: ok, start: now.UnixNano()}
	if ok {
		r.sc.TraceID, r.parent = parent.TraceID, parent.SpanID
	} else {
		r.sc.TraceID = ids.TraceID()
	}
	r.sc.SpanID = ids.SpanID()
	r.sampled = s.Sample(r.sc.TraceID, parent, ok)
	if r.sampled {
		r.sc.Flags = FlagSampled
	}
	// A tracestate belongs to the traceparent it came with: with a new
	// trace, or when malformed, it is not passed on.
	r.dropState = in.State.Fields() > 0 && (!ok || !in.State.OK())
	AppendTraceparent(r.tp[:0], r.sc)
}

// On reports whether the request is traced (sampled or not).
func (r *Request) On() bool { return r != nil && r.on }

// Sampled reports whether the request's span is sampled.
func (r *Request) Sampled() bool { return r.On() && r.sampled }

// Context is levee's span of the request.
func (r *Request) Context() SpanContext { return r.sc }

// Traceparent is what the backend gets in place of the client's
// traceparent fields: levee's span as the parent. nil when off.
func (r *Request) Traceparent() []byte {
	if !r.On() {
		return nil
	}
	return r.tp[:]
}

// DropTracestate reports whether the client's tracestate fields must be
// removed from the request to the backend.
func (r *Request) DropTracestate() bool { return r.On() && r.dropState }

// Mark records that stage s ran, now.
func (r *Request) Mark(s Stage, clk Clock) {
	if r.On() {
		r.marks[s] = clk.Now().UnixNano()
	}
}

// Waited records how long the request waited in the queue for its slot.
func (r *Request) Waited(d time.Duration) {
	if r.On() {
		r.waited = d
	}
}

// Export decides, as the request ends at now, whether its span goes out:
// a refused request's whatever it was sampled as, while lim has a token
// (refusals are what an operator looks for, and come in floods); any
// other request's when it was sampled.
func (r *Request) Export(refused bool, now time.Time, lim *RefusalLimiter) bool {
	switch {
	case !r.On():
		return false
	case refused:
		return lim.AllowAt(now)
	}
	return r.sampled
}

// Fill writes the request's ids, times and stage events on sp, ending at end.
func (r *Request) Fill(sp *Span, end time.Time) {
	sp.TraceID, sp.SpanID, sp.Parent, sp.Flags, sp.Remote = r.sc.TraceID, r.sc.SpanID, r.parent, r.sc.Flags, r.remote
	sp.Start, sp.End = r.start, end.UnixNano()
	for s, t := range r.marks {
		if t == 0 {
			continue
		}
		if Stage(s) == StageAdmitted && r.waited > 0 {
			sp.Event(eventQueued, t-int64(r.waited))
		}
		sp.Event(stageNames[s], t)
	}
}

// Reset turns tracing off for the exchange's next request.
func (r *Request) Reset() { r.on = false }
