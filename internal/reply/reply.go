// Package reply holds levee's own answers: one table of every reason a
// request is refused or fails at levee (a limit of admit, shape, ratelimit,
// protect, catalog or bandwidth; or no route, no backend, a backend error),
// each with its status, header and body, built once. Both engines write
// from it, so a reason is answered alike on HTTP/1.1 and HTTP/2, and a
// refusal allocates nothing on HTTP/1.1 (net/http's header maps need a
// []string, which the table also holds prebuilt).
//
// This package writes net/http answers; the fasthttp engine's writer is
// package fastreply, so that what needs the table without fasthttp (the
// gate, internal/limits, and the admission library) does not link it.
package reply

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/leveeproxy/levee/internal/shape"
)

// Headers that explain a response levee made itself rather than the backend.
const (
	// Reject names the limit that refused a request.
	Reject = "Levee-Reject"
	// Error names why levee could not get a response from a backend.
	Error = "Levee-Error"
	// Shadow tells the backend which limits would have refused the request
	// had they not been shadowed (limits.shadow). It is levee's own: one a
	// client sends never reaches the backend, on either engine.
	Shadow = "Levee-Shadow"
)

// MarkShadow sets h's Shadow header to shadow ("": none), dropping any the
// client sent.
func MarkShadow(h http.Header, shadow string) {
	delete(h, Shadow)
	if shadow != "" {
		h[Shadow] = []string{shadow}
	}
}

// Reply is the answer for one reason. Replies are shared: read-only.
type Reply struct {
	Status int
	// Header is Reject for a limit's refusal, Error for the rest.
	Header string
	Reason string
	Body   string // "levee: rejected: REASON\n" or a sentence
	// Close: the connection cannot be kept (part of the request body was
	// read and the rest is unknown).
	Close bool
	// RetryAfter is the hint a reason always carries (0: none, or the
	// caller's); the caller's non-zero hint wins.
	RetryAfter time.Duration

	reason, body []byte   // for fasthttp
	reasonV      []string // for net/http's header map
}

// Reasons levee gives beside those of admit and shape.
const (
	NoRoute            = "no-route"
	NoBackend          = "no-backend"
	Bandwidth          = "bandwidth"
	Body               = "body"
	Rate               = "rate"
	ClientRate         = "client-rate"
	BadRequestBody     = "bad-request-body"
	BackendTimeout     = "backend-timeout"
	BackendUnreachable = "backend-unreachable"
	// MinRate: a client sent its request body slower than server.min_rate.
	MinRate = "min-rate"
	// RequestTimeout: a request's headers, or the start of its body, did not
	// come in time (read_header_timeout, min_rate), before any routing.
	RequestTimeout = "request-timeout"
)

// Shadowable are the refusal reasons of an app's own policy limits that
// limits.shadow can turn into counts, in the order the request path checks
// them (the gate's shadow bits follow it); `shadow: true` is all of them.
var Shadowable = []string{
	string(shape.URLLength), string(shape.QueryValues), string(shape.HeaderCount), string(shape.HeaderBytes),
	Rate, ClientRate, Body,
	string(shape.BatchItems), string(shape.BatchJSON), string(shape.BatchShape),
}

// build fills a reply's defaults (the body, the Reject header) and the
// prebuilt forms the engines write.
func build(r Reply) *Reply {
	if r.Body == "" {
		r.Body = "levee: rejected: " + r.Reason + "\n"
	}
	if r.Header == "" {
		r.Header = Reject
	}
	r.reason, r.body, r.reasonV = []byte(r.Reason), []byte(r.Body), []string{r.Reason}
	return &r
}

// For returns the reply for reason. A reason not in the table (a broken
// invariant) gets a 503 built on the spot, so it still answers.
func For(reason string) *Reply {
	if r, ok := table[reason]; ok {
		return r
	}
	return build(Reply{Status: http.StatusServiceUnavailable, Reason: reason})
}

// ContentType and NoSniff are the Content-Type and X-Content-Type-Options
// of every reply.
const (
	ContentType = "text/plain; charset=utf-8"
	NoSniff     = "nosniff"
)

// Shared header values: net/http only reads them; nothing may append to them.
var (
	textPlain = []string{ContentType}
	nosniff   = []string{NoSniff}
	closeV    = []string{"close"}
	// retryAfterV are the Retry-After values of 1..60 s, prebuilt.
	retryAfterV = func() (v [61][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// seconds renders d as whole seconds, rounded up, at least 1.
func seconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

func (r *Reply) retryAfter(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return r.RetryAfter
}

// ReasonBytes and BodyBytes are the reply's reason and body, prebuilt for
// writers that take bytes (the fasthttp engine's, package fastreply). They
// are shared: read-only.
func (r *Reply) ReasonBytes() []byte { return r.reason }
func (r *Reply) BodyBytes() []byte   { return r.body }

// RetryAfterSeconds is the Retry-After the reply sends given the caller's
// hint (0: the reply's own, if any), in whole seconds rounded up; 0 when
// it sends none.
func (r *Reply) RetryAfterSeconds(hint time.Duration) int64 {
	if d := r.retryAfter(hint); d > 0 {
		return seconds(d)
	}
	return 0
}

// HTTP writes r on a net/http response, beside any header the caller set.
func (r *Reply) HTTP(w http.ResponseWriter, retryAfter time.Duration) {
	h := w.Header()
	h["Content-Type"] = textPlain
	h[r.Header] = r.reasonV
	h["X-Content-Type-Options"] = nosniff
	if s := r.RetryAfterSeconds(retryAfter); s > 0 {
		if s < int64(len(retryAfterV)) {
			h["Retry-After"] = retryAfterV[s]
		} else {
			h["Retry-After"] = []string{strconv.FormatInt(s, 10)}
		}
	}
	if r.Close {
		h["Connection"] = closeV
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.body)
}

// violationV are the Levee-Reject values of the shape reasons, prebuilt.
var violationV = func() map[shape.Reason][]string {
	m := map[shape.Reason][]string{}
	for _, r := range []shape.Reason{shape.HeaderBytes, shape.HeaderCount, shape.URLLength, shape.QueryValues,
		shape.BatchItems, shape.BatchJSON, shape.BatchShape} {
		m[r] = []string{string(r)}
	}
	return m
}()

// ViolationHTTP answers a shape violation on net/http: its status, its
// reason and its message (which names the limit) as the body. It
// allocates nothing when w has a WriteString (net/http's own writers do).
// closeConn: part of the body was read.
func ViolationHTTP(w http.ResponseWriter, v *shape.Violation, closeConn bool) {
	h := w.Header()
	h["Content-Type"] = textPlain
	if rv, ok := violationV[v.Reason]; ok {
		h[Reject] = rv
	} else {
		h.Set(Reject, string(v.Reason))
	}
	h["X-Content-Type-Options"] = nosniff
	if closeConn {
		h["Connection"] = closeV
	}
	w.WriteHeader(v.Status)
	for _, s := range [...]string{"levee: rejected: ", v.Msg, "\n"} {
		_, _ = io.WriteString(w, s)
	}
}

// Raw is reason's reply as the bytes of a whole HTTP/1.1 response that
// closes the connection: for a connection refused at accept, before any
// request was read. It is built once per reason; reason must be in the table.
func Raw(reason string) []byte {
	if b, ok := raws[reason]; ok {
		return b
	}
	return raws[NoRoute] // never: a broken invariant answered safely
}

func buildRaw(r *Reply) []byte {
	b := []byte("HTTP/1.1 " + strconv.Itoa(r.Status) + " " + http.StatusText(r.Status) + "\r\n" +
		"Content-Type: " + textPlain[0] + "\r\n" + r.Header + ": " + r.Reason + "\r\n")
	if r.RetryAfter > 0 {
		b = append(b, "Retry-After: "+strconv.FormatInt(seconds(r.RetryAfter), 10)+"\r\n"...)
	}
	return append(b, "Connection: close\r\nContent-Length: "+strconv.Itoa(len(r.Body))+"\r\n\r\n"+r.Body...)
}
