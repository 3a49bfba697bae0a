package trace

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Sampler decides which requests are traced: a request whose parent is
// sampled is, one whose parent is not is not (parent-based), and a root
// (no valid traceparent) by its trace id against Ratio, as OpenTelemetry's
// TraceIDRatioBased does, so every hop with the same ratio agrees.
type Sampler struct {
	threshold uint64
}

// NewSampler samples ratio (0..1) of root requests.
func NewSampler(ratio float64) Sampler {
	switch {
	case !(ratio > 0):
		return Sampler{}
	case ratio >= 1:
		return Sampler{threshold: math.MaxUint64}
	}
	return Sampler{threshold: uint64(ratio * (1 << 63))}
}

// Sample decides for a request of trace id, with parent the client's
// traceparent (hasParent false: none, or not valid).
func (s Sampler) Sample(id TraceID, parent SpanContext, hasParent bool) bool {
	if hasParent {
		return parent.Sampled()
	}
	if s.threshold == math.MaxUint64 {
		return true
	}
	return binary.BigEndian.Uint64(id[8:])>>1 < s.threshold
}

// RefusalLimiter bounds how many refused requests are traced: a GCRA bucket
// of perSecond tokens a second, bursts of up to perSecond (at least one).
// Safe for concurrent use, lock-free; a nil or zero-rate limiter allows
// nothing, so that a flood of refusals can never flood the exporter.
type RefusalLimiter struct {
	interval  int64 // ns per token
	tolerance int64 // ns of burst
	tat       atomic.Int64
}

// NewRefusalLimiter allows perSecond refusals a second (0: none).
func NewRefusalLimiter(perSecond int) *RefusalLimiter {
	if perSecond <= 0 {
		return &RefusalLimiter{}
	}
	iv := int64(time.Second) / int64(perSecond)
	return &RefusalLimiter{interval: iv, tolerance: iv * int64(max(perSecond, 1)-1)}
}

// AllowAt reports whether a refusal at now may be traced, taking a token.
func (l *RefusalLimiter) AllowAt(now time.Time) bool {
	if l == nil || l.interval == 0 {
		return false
	}
	t := now.UnixNano()
	for {
		tat := l.tat.Load()
		next := max(tat, t) + l.interval
		if next-t > l.tolerance+l.interval {
			return false
		}
		if l.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// IDs makes trace and span ids. The zero value draws from math/rand/v2's
// runtime source (ChaCha8 per thread: fast, safe for concurrent use and
// allocation-free); Rand replaces it in tests.
type IDs struct {
	Rand func() uint64
}

func (g IDs) next() uint64 {
	if g.Rand != nil {
		return g.Rand()
	}
	return rand.Uint64()
}

// TraceID returns a new, valid trace id.
func (g IDs) TraceID() TraceID {
	var id TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], g.next())
		binary.BigEndian.PutUint64(id[8:], g.next())
	}
	return id
}

// SpanID returns a new, valid span id.
func (g IDs) SpanID() SpanID {
	var id SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], g.next())
	}
	return id
}
