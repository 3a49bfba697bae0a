package admission

import (
	"net/http"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
)

// Limits are the limits of one handler, as levee's `limits:` section of
// an app writes them. Make them with ParseLimits; the zero Limits are not
// usable (Middleware panics). A Limits value is read-only and may be used
// for any number of middlewares, each with its own state.
type Limits struct {
	l  config.Limits
	ok bool
}

// ParseLimits decodes and validates yaml as a `limits:` section of levee's
// config: the same keys, defaults and checks, with errors that name the
// field path (limits.rate: ...). Empty yaml is levee's default limits.
func ParseLimits(yaml []byte) (Limits, error) {
	l, err := config.ParseLimits(yaml)
	if err != nil {
		return Limits{}, err
	}
	return Limits{l: l, ok: true}, nil
}

// Middleware returns a middleware that applies l to every request, in
// levee's order and with levee's scheduler: limits.rate and
// limits.client.rate (by limits.client.key), limits.body on the declared
// Content-Length, then the concurrency limit and its queue
// (limits.concurrency, limits.queue) with limits.priority and
// limits.fair_share. A refused request gets exactly the answer the levee
// proxy gives (status, Levee-Reject, Retry-After, RateLimit and
// RateLimit-Policy, body), and never reaches the wrapped handler; a client
// that goes away while queued gets none.
//
// Each call makes new state: handlers wrapped by one returned middleware
// share its limits, those of two calls do not. The middleware is safe for
// concurrent use and starts no goroutine. It panics if l was not made by
// ParseLimits.
//
// Not applied (yet): limits.shadow, the request-shape limits other than
// body (header_bytes, header_count, url_length, query_values, batch),
// limits.per_path, an adaptive concurrency, bandwidth and the response
// and request buffers; a body without a declared length is cut at
// limits.body by http.MaxBytesReader rather than refused with 413.
func Middleware(l Limits) func(http.Handler) http.Handler {
	if !l.ok {
		panic("admission: Middleware with zero Limits; make them with ParseLimits")
	}
	h := limits.NewHandler("admission", l.l, nil, nil)
	return func(next http.Handler) http.Handler { return h.With(next) }
}
