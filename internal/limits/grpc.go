package limits

import (
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

// GRPC answers ref for a gRPC client (reply.Reply.GRPC: a trailers-only
// 200 with grpc-status), RateLimit fields included. rec records the
// status the refusal stands for, not the 200 that carries it, so that
// metrics, the balancer and an adaptive limit count it as on HTTP.
func (ref *Refusal) GRPC(rec *Recorder) {
	if ref.Rate != nil {
		ref.Rate.HTTPHeaders(rec.Header(), ref.Decision)
	}
	a := ref.Answer()
	rec.RecordAs(a.Status)
	a.GRPC(rec, ref.RetryAfter)
}

// ViolationGRPC answers a shape violation for a gRPC client, recorded as
// its HTTP status (see Refusal.GRPC).
func ViolationGRPC(rec *Recorder, v *shape.Violation) {
	rec.RecordAs(v.Status)
	reply.ViolationGRPC(rec, v)
}

// RecordAs sets the code recorded for an answer whose status line is not
// what it means (a gRPC refusal's 200), if none was written yet.
func (rec *Recorder) RecordAs(code int) {
	if rec.Code == 0 {
		rec.Code = code
	}
}
