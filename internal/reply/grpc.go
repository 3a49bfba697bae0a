package reply

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/shape"
)

// IsGRPC reports whether a request's Content-Type is gRPC's
// (application/grpc, application/grpc+proto, application/grpc;…): its
// client reads an answer only from grpc-status, and its body is a stream
// of messages rather than a document.
func IsGRPC[T string | []byte](contentType T) bool {
	const prefix = "application/grpc"
	if len(contentType) < len(prefix) || !ascii.EqualFold(contentType[:len(prefix)], prefix) {
		return false
	}
	rest := contentType[len(prefix):]
	return len(rest) == 0 || rest[0] == '+' || rest[0] == ';'
}

// The gRPC status codes levee answers with (google.golang.org/grpc/codes,
// not imported: the table needs no gRPC).
const (
	GRPCDeadlineExceeded  = 4
	GRPCResourceExhausted = 8
	GRPCUnimplemented     = 12
	GRPCInternal          = 13
	GRPCUnavailable       = 14
)

// GRPCCode is the gRPC status a gRPC client gets for r, read from the
// table's row, so that every reason has one:
//
//   - a request refused for itself, by a limit on its own rate, shape or
//     size (Levee-Reject with a 4xx: rate, client-rate, batch, shape,
//     body, min-rate), is RESOURCE_EXHAUSTED: sending it again as it is
//     will not pass;
//   - one that levee or its backends cannot take now (503: queue-full,
//     shed, backend-share, no-backend, catalog-busy, …; 502 and 504, as
//     gRPC maps them) is UNAVAILABLE, which a client's retry policy
//     retries, after grpc-retry-pushback-ms;
//   - deadline is DEADLINE_EXCEEDED; no-route and a method levee does not
//     pass on are UNIMPLEMENTED; the rest (a malformed request) INTERNAL.
func (r *Reply) GRPCCode() int {
	switch {
	case r.Reason == Deadline:
		return GRPCDeadlineExceeded
	case r.Status == http.StatusServiceUnavailable || r.Status == http.StatusBadGateway || r.Status == http.StatusGatewayTimeout:
		return GRPCUnavailable
	case r.Header == Reject && r.Status >= 400 && r.Status < 500:
		return GRPCResourceExhausted
	case r.Status == http.StatusNotFound || r.Status == http.StatusNotImplemented:
		return GRPCUnimplemented
	}
	return GRPCInternal
}

// Shared values of gRPC replies: net/http only reads them.
var (
	grpcContentType = []string{"application/grpc"}
	grpcCodeV       = func() (v [17][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// GRPC writes r for a gRPC client: HTTP 200 and a trailers-only response
// (no body: the header block ends the stream) whose grpc-status is
// GRPCCode, grpc-message r's body (which names the limit), Levee-Reject
// or Levee-Error as metadata, and, with a Retry-After, the same figure as
// grpc-retry-pushback-ms, which a gRPC client's retry policy waits.
func (r *Reply) GRPC(w http.ResponseWriter, retryAfter time.Duration) {
	h := w.Header()
	writeGRPC(h, r.GRPCCode(), r.Body)
	h[r.Header] = r.reasonV
	if d := r.retryAfter(retryAfter); d > 0 {
		if s := seconds(d); s < int64(len(retryAfterV)) {
			h["Retry-After"] = retryAfterV[s]
		} else {
			h["Retry-After"] = []string{strconv.FormatInt(s, 10)}
		}
		h["Grpc-Retry-Pushback-Ms"] = []string{strconv.FormatInt(max(int64((d+time.Millisecond-1)/time.Millisecond), 1), 10)}
	}
	w.WriteHeader(http.StatusOK)
}

// ViolationGRPC answers a shape violation for a gRPC client, as GRPC
// does: RESOURCE_EXHAUSTED, its message naming the limit.
func ViolationGRPC(w http.ResponseWriter, v *shape.Violation) {
	h := w.Header()
	writeGRPC(h, GRPCResourceExhausted, "levee: rejected: "+v.Msg)
	if rv, ok := violationV[v.Reason]; ok {
		h[Reject] = rv
	} else {
		h.Set(Reject, string(v.Reason))
	}
	w.WriteHeader(http.StatusOK)
}

func writeGRPC(h http.Header, code int, msg string) {
	h["Content-Type"] = grpcContentType
	h["Grpc-Status"] = grpcCodeV[code]
	h["Grpc-Message"] = []string{grpcMessage(strings.TrimSuffix(msg, "\n"))}
}

// grpcMessage percent-encodes s as grpc-message wants (gRPC over HTTP/2:
// bytes outside printable ASCII, and '%').
func grpcMessage(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)+strconv.FormatUint(uint64(c)&15, 16)))
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Deadline is the reason of a request whose deadline (the client's, or
// the app's upstream.deadline.timeout) passed before it could be sent: levee
// refuses it rather than give the backend work no one waits for.
const Deadline = "deadline"

// DeadlineReply answers it: 504, as a backend that took too long.
var DeadlineReply = Register(Reply{Status: http.StatusGatewayTimeout, Reason: Deadline,
	Body: "levee: rejected: deadline: the request's deadline passed while it waited\n"})
