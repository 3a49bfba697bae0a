package trace

import "google.golang.org/protobuf/encoding/protowire"

// The OTLP protobuf messages levee writes, by field number
// (opentelemetry-proto: collector/trace/v1/trace_service.proto,
// trace/v1/trace.proto, common/v1/common.proto, resource/v1/resource.proto).
// Written with protowire rather than the generated go.opentelemetry.io/proto/otlp
// types, whose collector package links gRPC into the binary; the tests
// decode what is written here with those generated types.
const (
	fReqResourceSpans  = 1 // ExportTraceServiceRequest.resource_spans
	fRSResource        = 1 // ResourceSpans.resource
	fRSScopeSpans      = 2 // ResourceSpans.scope_spans
	fResourceAttrs     = 1 // Resource.attributes
	fSSScope           = 1 // ScopeSpans.scope
	fSSSpans           = 2 // ScopeSpans.spans
	fSSSchemaURL       = 3 // ScopeSpans.schema_url
	fScopeName         = 1 // InstrumentationScope.name
	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanTraceState    = 3
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7 // fixed64
	fSpanEnd           = 8 // fixed64
	fSpanAttributes    = 9
	fSpanEvents        = 11
	fSpanStatus        = 15
	fSpanFlags         = 16 // fixed32
	fEventTime         = 1  // fixed64
	fEventName         = 2
	fStatusCode        = 3
	fKVKey             = 1
	fKVValue           = 2
	fAnyString         = 1
	fAnyInt            = 3
	spanKindServer     = 2
	statusCodeError    = 2
	spanFlagsHasRemote = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	spanFlagsIsRemote  = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// schemaURL is the semantic conventions the attributes follow.
const schemaURL = "https://opentelemetry.io/schemas/1.26.0"

// scopeName is the instrumentation scope of levee's spans.
const scopeName = "github.com/leveeproxy/levee"

// encoder writes ExportTraceServiceRequests into buffers it keeps, so a
// batch costs no allocation once they have grown. Not safe for concurrent
// use: the exporter's goroutine owns it.
type encoder struct {
	out, scope, span, tmp []byte
}

// encode returns the request body for spans from service, valid until the
// next call.
func (e *encoder) encode(service string, spans []*Span) []byte {
	e.scope = e.scope[:0]
	e.tmp = protowire.AppendTag(e.tmp[:0], fScopeName, protowire.BytesType)
	e.tmp = protowire.AppendString(e.tmp, scopeName)
	e.scope = appendBytesField(e.scope, fSSScope, e.tmp)
	for _, sp := range spans {
		e.span = appendSpan(e.span[:0], sp)
		e.scope = appendBytesField(e.scope, fSSSpans, e.span)
	}
	e.scope = protowire.AppendTag(e.scope, fSSSchemaURL, protowire.BytesType)
	e.scope = protowire.AppendString(e.scope, schemaURL)

	// Resource { attributes: [service.name] }, then ResourceSpans.
	e.tmp = appendKVString(e.tmp[:0], fResourceAttrs, "service.name", service)
	e.span = appendBytesField(e.span[:0], fRSResource, e.tmp)
	e.span = appendBytesField(e.span, fRSScopeSpans, e.scope)
	e.out = appendBytesField(e.out[:0], fReqResourceSpans, e.span)
	return e.out
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendSpan(b []byte, sp *Span) []byte {
	b = appendBytesField(b, fSpanTraceID, sp.TraceID[:])
	b = appendBytesField(b, fSpanSpanID, sp.SpanID[:])
	if sp.state.n > 0 {
		b = appendBytesField(b, fSpanTraceState, sp.str(sp.state))
	}
	if sp.Parent.IsValid() {
		b = appendBytesField(b, fSpanParentSpanID, sp.Parent[:])
	}
	b = appendBytesField(b, fSpanName, sp.str(sp.name))
	b = protowire.AppendTag(b, fSpanKind, protowire.VarintType)
	b = protowire.AppendVarint(b, spanKindServer)
	b = protowire.AppendTag(b, fSpanStart, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(sp.Start))
	b = protowire.AppendTag(b, fSpanEnd, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(sp.End))
	for _, a := range sp.attrs {
		if a.isInt {
			b = appendKVInt(b, fSpanAttributes, a.key, a.i)
		} else {
			b = appendKVString(b, fSpanAttributes, a.key, sp.str(a.str))
		}
	}
	for _, ev := range sp.events {
		n := 1 + 8 + 1 + protowire.SizeBytes(len(ev.name))
		b = protowire.AppendTag(b, fSpanEvents, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = protowire.AppendTag(b, fEventTime, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, uint64(ev.t))
		b = protowire.AppendTag(b, fEventName, protowire.BytesType)
		b = protowire.AppendString(b, ev.name)
	}
	if sp.Error {
		b = protowire.AppendTag(b, fSpanStatus, protowire.BytesType)
		b = protowire.AppendVarint(b, 2) // one tag byte, one varint byte
		b = protowire.AppendTag(b, fStatusCode, protowire.VarintType)
		b = protowire.AppendVarint(b, statusCodeError)
	}
	flags := uint32(sp.Flags) | spanFlagsHasRemote
	if sp.Remote {
		flags |= spanFlagsIsRemote
	}
	b = protowire.AppendTag(b, fSpanFlags, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

// appendKVString appends field num: KeyValue{key, AnyValue{string_value: v}}.
func appendKVString[T string | []byte](b []byte, num protowire.Number, key string, v T) []byte {
	b = appendKVHead(b, num, key, 1+protowire.SizeBytes(len(v)))
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendKVInt appends field num: KeyValue{key, AnyValue{int_value: v}}.
func appendKVInt(b []byte, num protowire.Number, key string, v int64) []byte {
	b = appendKVHead(b, num, key, 1+protowire.SizeVarint(uint64(v)))
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// appendKVHead appends field num's tag and length and the KeyValue's key,
// leaving its value (an AnyValue of anySize bytes) to the caller.
func appendKVHead(b []byte, num protowire.Number, key string, anySize int) []byte {
	kv := 1 + protowire.SizeBytes(len(key)) + 1 + protowire.SizeBytes(anySize)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(anySize))
}
