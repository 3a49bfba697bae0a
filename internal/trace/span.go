package trace

import "sync"

// Span is one finished server span as the exporter sends it. Its strings
// are copied into an arena it owns, so a Span outlives the request's
// buffers; Spans are pooled (NewSpan, and the exporter frees them).
type Span struct {
	TraceID TraceID
	SpanID  SpanID
	Parent  SpanID // zero: a root span
	Flags   byte
	Remote  bool  // Parent came from the client
	Start   int64 // Unix ns
	End     int64
	Error   bool // the status is Error (a 5xx, per the HTTP semantic conventions)

	name, state ref
	attrs       []attr
	events      []event
	arena       []byte
}

type ref struct{ off, n int }

type attr struct {
	key   string // a constant: never copied
	str   ref
	i     int64
	isInt bool
}

type event struct {
	name string // a constant
	t    int64
}

var spans = sync.Pool{New: func() any { return new(Span) }}

// NewSpan returns an empty span from the pool.
func NewSpan() *Span { return spans.Get().(*Span) }

// Free gives sp back to the pool; it must not be used after.
func (sp *Span) Free() {
	arena, attrs, events := sp.arena[:0], sp.attrs[:0], sp.events[:0]
	*sp = Span{arena: arena, attrs: attrs, events: events}
	spans.Put(sp)
}

func (sp *Span) keep(parts ...string) ref {
	r := ref{off: len(sp.arena)}
	for _, p := range parts {
		sp.arena = append(sp.arena, p...)
	}
	r.n = len(sp.arena) - r.off
	return r
}

func (sp *Span) str(r ref) []byte { return sp.arena[r.off : r.off+r.n] }

// SetName sets the span's name to a and b joined by a space.
func (sp *Span) SetName(a, b string) { sp.name = sp.keep(a, " ", b) }

// SetTraceState sets the tracestate the span was propagated with.
func (sp *Span) SetTraceState(v string) { sp.state = sp.keep(v) }

// AddTraceState appends one more tracestate field, joined with a comma:
// the fields of one list may come in several headers. Each call must
// follow the last string kept.
func (sp *Span) AddTraceState(v string) {
	if sp.state.n == 0 {
		sp.SetTraceState(v)
		return
	}
	sp.arena = append(append(sp.arena, ','), v...)
	sp.state.n += 1 + len(v)
}

// Str adds a string attribute; key must be a constant.
func (sp *Span) Str(key, v string) { sp.attrs = append(sp.attrs, attr{key: key, str: sp.keep(v)}) }

// Int adds an integer attribute; key must be a constant.
func (sp *Span) Int(key string, v int64) {
	sp.attrs = append(sp.attrs, attr{key: key, i: v, isInt: true})
}

// Event adds an event at t (Unix ns); name must be a constant.
func (sp *Span) Event(name string, t int64) { sp.events = append(sp.events, event{name: name, t: t}) }
