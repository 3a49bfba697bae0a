// Package deadline is how much time a request has left, as levee hands
// it to a backend: Levee-Deadline, milliseconds from when it was sent,
// and gRPC's own grpc-timeout. The proxy writes both; package admission
// reads Levee-Deadline, so a backend drops work whose client has gone.
package deadline

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// Header carries a request's time left to the backend, in whole
// milliseconds, rounded down (0: none left).
const Header = "Levee-Deadline"

// GRPCHeader is gRPC's own (gRPC over HTTP/2, "Timeout").
const GRPCHeader = "Grpc-Timeout"

// maxMillis bounds a parsed value (about 3 years): a larger one is no
// deadline a caller can keep, and its Duration would overflow.
const maxMillis = 1 << 40

// ParseMillis reads a Levee-Deadline value: decimal digits only.
func ParseMillis(s string) (time.Duration, bool) {
	if s == "" || len(s) > 13 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if n > maxMillis {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// FormatMillis writes d as a Levee-Deadline value (negative: 0).
func FormatMillis(d time.Duration) string { return string(AppendMillis(nil, d)) }

// AppendMillis appends FormatMillis(d) to b.
func AppendMillis(b []byte, d time.Duration) []byte {
	return strconv.AppendInt(b, max(int64(d/time.Millisecond), 0), 10)
}

// grpcUnits are grpc-timeout's units, largest first.
var grpcUnits = [...]struct {
	c byte
	d time.Duration
}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}, {'m', time.Millisecond}, {'u', time.Microsecond}, {'n', time.Nanosecond}}

// ParseGRPCTimeout reads a grpc-timeout value: at most 8 digits and a
// unit (H, M, S, m, u, n).
func ParseGRPCTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s)-1; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	for _, u := range grpcUnits {
		if u.c == s[len(s)-1] {
			if n > int64(maxMillis*time.Millisecond/u.d) {
				return 0, false
			}
			return time.Duration(n) * u.d, true
		}
	}
	return 0, false
}

// FormatGRPCTimeout writes d as a grpc-timeout value: in the finest unit
// that fits 8 digits, rounded up so a deadline is never made shorter
// than the caller's by the rounding (negative or zero: 0n).
func FormatGRPCTimeout(d time.Duration) string { return string(AppendGRPCTimeout(nil, d)) }

// AppendGRPCTimeout appends FormatGRPCTimeout(d) to b.
func AppendGRPCTimeout(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0n"...)
	}
	const most = 1e8 - 1
	for i := len(grpcUnits) - 1; i >= 0; i-- {
		u := grpcUnits[i]
		if n := (d + u.d - 1) / u.d; n <= most {
			return append(strconv.AppendInt(b, int64(n), 10), u.c)
		}
	}
	return append(strconv.AppendInt(b, most, 10), 'H')
}

// Left is the time a request that arrived at start has once it is sent
// at now: the smaller of the client's own time (client, if ok) and the
// app's timeout, less the time since start.
func Left(start, now time.Time, timeout, client time.Duration, ok bool) time.Duration {
	if ok && client < timeout {
		timeout = client
	}
	return timeout - now.Sub(start)
}

// FromHTTP is the time a client's net/http request gives itself, from
// now: grpc-timeout for a gRPC call (grpc), and the header named
// (canonical; "": none looked for) in milliseconds, the smaller if both
// do. A field sent more than once gives none. ok false: none given.
func FromHTTP(h http.Header, grpc bool, header string) (d time.Duration, ok bool) {
	if grpc {
		if v := h[GRPCHeader]; len(v) == 1 {
			d, ok = ParseGRPCTimeout(v[0])
		}
	}
	if header != "" {
		if v := h[header]; len(v) == 1 {
			if hd, hok := ParseMillis(v[0]); hok && (!ok || hd < d) {
				d, ok = hd, true
			}
		}
	}
	return d, ok
}

// Wait is a request's context with its deadline, for its wait in a queue
// only: the deadline is the one With was given, or the parent's if
// sooner; Done and Err are the parent's. A limiter reads Deadline and
// bounds its own timer by it, so no timer or goroutine is made for it
// (context.WithDeadline would watch the parent, and the fasthttp engine's
// context polls the client's socket once watched). Held in a pooled
// request, it allocates nothing: nothing keeps it past the wait (the
// limiter's waiter does not hold it). The zero value is not a context;
// With makes it one. Not safe for concurrent use with With.
type Wait struct {
	context.Context
	at time.Time
}

// With sets w to ctx and at and returns it.
func (w *Wait) With(ctx context.Context, at time.Time) context.Context {
	*w = Wait{Context: ctx, at: at}
	return w
}

// Deadline is the deadline With was given, or the parent's if sooner.
func (w *Wait) Deadline() (time.Time, bool) {
	if at, ok := w.Context.Deadline(); ok && at.Before(w.at) {
		return at, true
	}
	return w.at, true
}
