package observe

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"
)

// AccessSample decides which requests the access log writes. The zero
// value writes none. It is a value, read from the config snapshot: taking
// a decision costs no lock and no allocation.
type AccessSample struct {
	all       bool
	threshold uint64 // a request is logged when a uniform uint64 is below it
}

// NewAccessSample logs each request with probability ratio: 0 (or less) is
// none, 1 (or more) every one.
func NewAccessSample(ratio float64) AccessSample {
	switch {
	case !(ratio > 0):
		return AccessSample{}
	case ratio >= 1:
		return AccessSample{all: true}
	}
	t := math.Ldexp(ratio, 64)
	if t >= math.Ldexp(1, 64) {
		return AccessSample{all: true}
	}
	return AccessSample{threshold: max(uint64(t), 1)}
}

// Take reports whether this request is logged, drawing from the runtime's
// per-thread generator (no lock).
func (s AccessSample) Take() bool {
	if s.all {
		return true
	}
	return s.threshold != 0 && s.Pick(rand.Uint64())
}

// On reports whether the sample takes any request.
func (s AccessSample) On() bool { return s.all || s.threshold != 0 }

// Pick is Take with the random draw given, for deterministic tests.
func (s AccessSample) Pick(r uint64) bool { return s.all || r < s.threshold }

// AccessRecord is one access log line.
type AccessRecord struct {
	Time     time.Time // when the request ended
	App      string
	Method   string
	Host     string
	Path     string
	Status   int
	Duration time.Duration
	Remote   string
	Bytes    uint64 // request and response body bytes (as the top clients count them)
	Reject   string // the Levee-Reject reason; "" when none
}

// AccessLog writes access lines to a handler (a JSON one, for one object
// per line): time, level, msg "access", app, method, host, path, status,
// duration_ms, remote, bytes and, for a refusal, reject. A line is written
// whatever the handler's level: the config turned the access log on.
type AccessLog struct{ h slog.Handler }

// NewAccessLog returns an AccessLog writing to h.
func NewAccessLog(h slog.Handler) *AccessLog { return &AccessLog{h: h} }

// Write writes r's line.
func (a *AccessLog) Write(r AccessRecord) {
	rec := slog.NewRecord(r.Time, slog.LevelInfo, "access", 0)
	rec.AddAttrs(slog.String("app", r.App), slog.String("method", r.Method), slog.String("host", r.Host),
		slog.String("path", r.Path), slog.Int("status", r.Status),
		slog.Float64("duration_ms", float64(r.Duration.Microseconds())/1000), slog.String("remote", r.Remote),
		slog.Uint64("bytes", r.Bytes))
	if r.Reject != "" {
		rec.AddAttrs(slog.String("reject", r.Reject))
	}
	_ = a.h.Handle(context.Background(), rec)
}
