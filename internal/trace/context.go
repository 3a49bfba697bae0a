// Package trace is levee's W3C Trace Context and its spans: parsing and
// writing traceparent and tracestate, the sampling decision, the state one
// request carries through the request path, and a small OTLP/HTTP exporter
// (protobuf written with protowire, so the binary needs no gRPC).
//
// Nothing here allocates on a request that is not sampled: Request lives
// inline in the engine's pooled exchange, and a Span is taken from a pool
// only for a request whose span will be exported.
package trace

// TraceID and SpanID are the W3C ids; all zeros is invalid.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// IsValid reports whether id is not all zeros.
func (id TraceID) IsValid() bool { return id != TraceID{} }

// IsValid reports whether id is not all zeros.
func (id SpanID) IsValid() bool { return id != SpanID{} }

// FlagSampled is the sampled bit of trace-flags.
const FlagSampled = 0x01

// SpanContext is one traceparent: a trace, a span in it and its flags.
type SpanContext struct {
	TraceID TraceID
	SpanID  SpanID
	Flags   byte
}

// Sampled reports whether the sampled flag is set.
func (sc SpanContext) Sampled() bool { return sc.Flags&FlagSampled != 0 }

// TraceparentLen is the length of a version-00 traceparent.
const TraceparentLen = 55

// ParseTraceparent parses a traceparent header value per W3C Trace Context:
// version 00 must be exactly 55 characters; a higher version (not ff) is
// read as version 00 if it is at least that long and continues with '-'
// (only its sampled flag is kept, as the spec says); hex must be lowercase;
// all-zero ids are invalid. It allocates nothing.
func ParseTraceparent[T string | []byte](v T) (SpanContext, bool) {
	var sc SpanContext
	if len(v) < TraceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return sc, false
	}
	ver, ok := hexByte(v[0], v[1])
	switch {
	case !ok || ver == 0xff:
		return sc, false
	case ver == 0 && len(v) != TraceparentLen:
		return sc, false
	case ver != 0 && len(v) > TraceparentLen && v[TraceparentLen] != '-':
		return sc, false
	}
	if !decodeHex(sc.TraceID[:], v[3:35]) || !decodeHex(sc.SpanID[:], v[36:52]) {
		return sc, false
	}
	flags, ok := hexByte(v[53], v[54])
	if !ok || !sc.TraceID.IsValid() || !sc.SpanID.IsValid() {
		return SpanContext{}, false
	}
	if ver != 0 {
		flags &= FlagSampled // a later version's other bits may mean something else
	}
	sc.Flags = flags
	return sc, true
}

// AppendTraceparent appends sc as a version-00 traceparent.
func AppendTraceparent(b []byte, sc SpanContext) []byte {
	b = append(b, "00-"...)
	b = appendHex(b, sc.TraceID[:]...)
	b = append(b, '-')
	b = appendHex(b, sc.SpanID[:]...)
	b = append(b, '-')
	return appendHex(b, sc.Flags)
}

func appendHex(b []byte, v ...byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range v {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

func decodeHex[T string | []byte](dst []byte, s T) bool {
	for i := range dst {
		b, ok := hexByte(s[2*i], s[2*i+1])
		if !ok {
			return false
		}
		dst[i] = b
	}
	return true
}

func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := nibble(hi)
	l, ok2 := nibble(lo)
	return h<<4 | l, ok1 && ok2
}

// nibble decodes one lowercase hex digit (the spec forbids uppercase).
func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
