package forward

import (
	"errors"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
	"github.com/leveeproxy/levee/internal/shape"
)

// failure is what a client gets for a request whose forwarding failed:
// levee's reply, or a shape violation's (v set).
type failure struct {
	rep *reply.Reply
	v   *shape.Violation
}

func (f failure) fast(ctx *fasthttp.RequestCtx) {
	if f.v != nil {
		fastreply.Violation(ctx, f.v, true) // the rest of the body is unread
		return
	}
	fastreply.Write(ctx, f.rep, 0)
}

func (f failure) http(w http.ResponseWriter) {
	if f.v != nil {
		reply.ViolationHTTP(w, f.v, true)
		return
	}
	f.rep.HTTP(w, 0)
}

// grpc writes f for a gRPC client: a trailers-only 200 with grpc-status.
// A writer that records statuses records f's own (limits.Recorder), so
// that the balancer and the metrics see a backend's failure as one.
func (f failure) grpc(w http.ResponseWriter) {
	status := f.status()
	if rec, ok := w.(interface{ RecordAs(int) }); ok {
		rec.RecordAs(status)
	}
	if f.v != nil {
		reply.ViolationGRPC(w, f.v)
		return
	}
	f.rep.GRPC(w, 0)
}

// status is the HTTP status f stands for.
func (f failure) status() int {
	if f.v != nil {
		return f.v.Status
	}
	return f.rep.Status
}

// fail is the one error ladder of both engines: it decides whose failure
// err is and what the client gets, and counts or logs it. bodyErr is why
// reading the client's body stopped, if the engine knows it apart from err
// (nil otherwise): a client whose body fails or is cut by a limit is the
// client's failure, never the backend's. In order: the app's bandwidth
// limit, a batch shape violation, the client's body (too slow, too large,
// broken), then the backend (timed out: 504, else 502).
func (p *Pool) fail(addr string, err, bodyErr error) failure {
	var v *shape.Violation
	switch {
	case errors.Is(err, bandwidth.ErrTooSlow) || errors.Is(bodyErr, bandwidth.ErrTooSlow):
		p.onReject(reasonBandwidth)
		return failure{rep: reply.BandwidthReply}
	case errors.As(err, &v):
		p.onReject(string(v.Reason))
		return failure{v: v}
	}
	fromBody := bodyErr != nil
	if !fromBody {
		bodyErr = err // the net/http engine's body errors come as err, typed
	}
	switch {
	case errors.Is(bodyErr, netlimit.ErrTooSlow):
		p.tooSlow(bodyErr)
		return failure{rep: reply.MinRateReply}
	case errors.Is(bodyErr, errBodyTooLarge) || errors.As(bodyErr, new(*http.MaxBytesError)):
		p.onReject(reply.Body)
		return failure{rep: reply.BodyCutReply}
	case fromBody || errors.As(err, new(*BadBodyError)):
		// The client's body broke off or was badly framed (invalid chunking).
		return failure{rep: reply.BadRequestBodyReply}
	case backendTimedOut(err):
		p.logBackendFailed(true, addr, err)
		return failure{rep: reply.BackendTimeoutReply}
	}
	p.logBackendFailed(false, addr, err)
	return failure{rep: reply.BackendUnreachableReply}
}
