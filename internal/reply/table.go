package reply

import (
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/protect"
)

// Reasons of levee's own steps whose names their packages cannot own
// without importing this one (framing answers from the table), or that
// have no package of their own to own them (the catalog's loader refusing).
const (
	// The catalog's loader is at its bounds, or its store failed.
	CatalogBusy        = "catalog-busy"
	CatalogUnavailable = "catalog-unavailable"

	// The request's deadline (the client's, or the app's upstream.timeout)
	// passed before it could be sent: levee refuses it rather than give
	// the backend work no one waits for.
	Deadline = "deadline"
	// A request waiting for a slot when levee began to drain (SIGTERM, or
	// an upgrade that handed over): answered so that its client retries,
	// on the levee that serves now.
	Draining = "draining"

	// Framing (package framing): the request would not reach the backend
	// in one unambiguous HTTP/1.1 form.
	BadRequest     = "bad-request"      // fasthttp could not read the request at all
	HeadersTooLong = "header-too-large" // the request line and headers overflow server.max_header_bytes
	BadHeader      = "bad-header"       // a field line levee would not forward as read
	BadFraming     = "bad-framing"      // the body's length is declared twice, or not unambiguously
	BadTarget      = "bad-target"       // a request-target levee does not route
	BadHost        = "bad-host"         // no authority, or one that is not a host[:port]
	Connect        = "connect"          // CONNECT: levee is not a tunnel
	Version        = "http-version"     // not HTTP/1.0 or HTTP/1.1 (on HTTP/1.x connections)
	Expectation    = "expectation"      // an Expect other than 100-continue
)

// rows are every reason levee refuses or fails a request for, and its
// answer: the status; the header that carries the reason (Reject, the
// default, for a limit's refusal; Error for the rest); the body ("levee:
// rejected: REASON\n" unless one is given); whether the connection closes;
// and the Retry-After rule: RetryAfter when set, else the refusing step's
// own hint when it has one (a rate limit's wait, a queue's, the catalog's
// loader.retry_after), else none. A new reason is one row here; the step
// that refuses names the reason, and both engines answer it from this row.
var rows = [...]Reply{
	// Routing and the backends (package forward).
	{Status: http.StatusNotFound, Header: Error, Reason: NoRoute, Body: "levee: no app for this host and path\n"},
	{Status: http.StatusServiceUnavailable, Reason: NoBackend, Body: "levee: rejected: no healthy backend\n", RetryAfter: time.Second},
	{Status: http.StatusGatewayTimeout, Header: Error, Reason: BackendTimeout, Body: "levee: backend timed out\n"},
	{Status: http.StatusBadGateway, Header: Error, Reason: BackendUnreachable, Body: "levee: backend unreachable\n"},
	{Status: http.StatusServiceUnavailable, Reason: Bandwidth, Body: "levee: rejected: bandwidth: the transfer was held too long\n",
		RetryAfter: time.Second, Close: true},

	// The request body (the engines' read ahead, forward's stream).
	{Status: http.StatusRequestEntityTooLarge, Reason: Body, Body: "levee: rejected: request body too large\n"},
	{Status: http.StatusBadRequest, Header: Error, Reason: BadRequestBody, Body: "levee: bad request body\n", Close: true},
	{Status: http.StatusRequestTimeout, Reason: MinRate, Body: "levee: rejected: min-rate: the request body came too slowly\n", Close: true},
	{Status: http.StatusRequestTimeout, Reason: RequestTimeout, Body: "levee: rejected: request-timeout: the request did not come in time\n",
		Close: true},

	// The gate (package limits): rate limits, then admission (package
	// admit), whose Rejection carries the wait as the hint.
	{Status: http.StatusTooManyRequests, Reason: Rate},
	{Status: http.StatusTooManyRequests, Reason: ClientRate},
	{Status: http.StatusServiceUnavailable, Reason: string(admit.QueueFull)},
	{Status: http.StatusServiceUnavailable, Reason: string(admit.QueueTimeout)},
	{Status: http.StatusServiceUnavailable, Reason: string(admit.Shed)},
	{Status: http.StatusServiceUnavailable, Reason: string(admit.ClientShare)},

	// backend_limits (package protect): admission's reasons for the
	// backend pool's slot, prefixed, and the pool's rate and share.
	{Status: http.StatusServiceUnavailable, Reason: protect.Prefix + string(admit.QueueFull)},
	{Status: http.StatusServiceUnavailable, Reason: protect.Prefix + string(admit.QueueTimeout)},
	{Status: http.StatusServiceUnavailable, Reason: protect.Prefix + string(admit.Shed)},
	{Status: http.StatusServiceUnavailable, Reason: protect.Prefix + string(admit.ClientShare)},
	{Status: http.StatusServiceUnavailable, Reason: string(protect.ReasonRate)},
	{Status: http.StatusServiceUnavailable, Reason: string(protect.ReasonShare)},

	// Connections refused at accept (package netlimit), answered raw
	// before any request was read: the hint is the table's.
	{Status: http.StatusServiceUnavailable, Reason: netlimit.MaxConns, RetryAfter: time.Second},
	{Status: http.StatusServiceUnavailable, Reason: netlimit.ConnsPerIP, RetryAfter: time.Second},

	// The deadline (the upstream leg's; package server) and the drain.
	{Status: http.StatusGatewayTimeout, Reason: Deadline, Body: "levee: rejected: deadline: the request's deadline passed while it waited\n"},
	{Status: http.StatusServiceUnavailable, Reason: Draining, Body: "levee: rejected: draining: levee is being stopped or upgraded; retry\n",
		RetryAfter: time.Second},

	// The catalog's loader; the hint is catalog.loader.retry_after.
	{Status: http.StatusServiceUnavailable, Reason: CatalogBusy},
	{Status: http.StatusServiceUnavailable, Reason: CatalogUnavailable},

	// Framing (package framing). None closes the connection here: on
	// HTTP/2 that would end every stream; on HTTP/1.x the engine closes it.
	{Status: http.StatusBadRequest, Header: Error, Reason: BadRequest, Body: "levee: bad request\n"},
	{Status: http.StatusRequestHeaderFieldsTooLarge, Header: Error, Reason: HeadersTooLong, Body: "levee: request headers too large\n"},
	{Status: http.StatusBadRequest, Header: Error, Reason: BadHeader, Body: "levee: bad request: malformed header field\n"},
	{Status: http.StatusBadRequest, Header: Error, Reason: BadFraming, Body: "levee: bad request: ambiguous message framing\n"},
	{Status: http.StatusBadRequest, Header: Error, Reason: BadTarget, Body: "levee: bad request: request-target\n"},
	{Status: http.StatusBadRequest, Header: Error, Reason: BadHost, Body: "levee: bad request: missing or invalid Host\n"},
	{Status: http.StatusNotImplemented, Header: Error, Reason: Connect, Body: "levee: CONNECT is not supported\n"},
	{Status: http.StatusHTTPVersionNotSupported, Header: Error, Reason: Version, Body: "levee: HTTP version not supported\n"},
	{Status: http.StatusExpectationFailed, Header: Error, Reason: Expectation,
		Body: "levee: expectation failed: only 100-continue is supported\n"},
}

// table and raws are rows, built once (defaults filled, bytes prebuilt),
// by reason; read without a lock.
var table, raws = func() (map[string]*Reply, map[string][]byte) {
	t, raw := make(map[string]*Reply, len(rows)), make(map[string][]byte, len(rows))
	for _, r := range rows {
		if _, dup := t[r.Reason]; dup { // a row would shadow another: a broken invariant
			panic("reply: two rows for " + r.Reason)
		}
		p := build(r)
		t[r.Reason], raw[r.Reason] = p, buildRaw(p)
	}
	return t, raw
}()

// The rows that callers keep a pointer to, to skip the lookup.
var (
	NoRouteReply            = For(NoRoute)
	NoBackendReply          = For(NoBackend)
	BandwidthReply          = For(Bandwidth)
	BodyReply               = For(Body)
	BadRequestBodyReply     = For(BadRequestBody)
	MinRateReply            = For(MinRate)
	RequestTimeoutReply     = For(RequestTimeout)
	BackendTimeoutReply     = For(BackendTimeout)
	BackendUnreachableReply = For(BackendUnreachable)
	DeadlineReply           = For(Deadline)
	// BodyCutReply is BodyReply for a body cut off while it streamed: the
	// same reason, and the connection closes (part of the body is unread).
	BodyCutReply = func() *Reply { r := *BodyReply; r.Close = true; return &r }()
)
