package forward

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/deadline"
	"github.com/leveeproxy/levee/internal/reply"
)

// handOnDeadline tells the backend the time out has left until at:
// Levee-Deadline (a client's own never passes: copyHead drops it), and
// for gRPC grpc-timeout in place of the client's, so that a backend
// stops work whose caller will not wait for it. A gRPC request comes
// only over HTTP/2, whose field names arrive canonical: Set replaces
// the client's grpc-timeout.
func (p *Pool) handOnDeadline(out *fasthttp.RequestHeader, at time.Time) {
	left := at.Sub(p.clk.Now())
	var buf [24]byte // the values are copied
	out.SetBytesV(deadline.Header, deadline.AppendMillis(buf[:0], left))
	if reply.IsGRPC(out.ContentType()) {
		out.SetBytesV(deadline.GRPCHeader, deadline.AppendGRPCTimeout(buf[:0], left))
	}
}
