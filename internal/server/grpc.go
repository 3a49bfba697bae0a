package server

import (
	"net/http"

	"github.com/leveeproxy/levee/internal/reply"
)

// isGRPC reports a gRPC call (on HTTP/2: gRPC has no HTTP/1.1 form). Its
// request body is a stream of messages that may go on as long as the
// call, each answered before the next is sent (bidirectional streaming):
// it is not read ahead of admission, nor paced at server.min_rate, either
// of which would hold the first message back or cut an idle stream. The
// body still counts against limits.body, and the call holds its slot
// while it lasts, as any streamed request does.
func isGRPC(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	return len(ct) == 1 && reply.IsGRPC(ct[0])
}

// refuseFraming answers a request framing refused, as gRPC's client
// reads it for a gRPC call.
func refuseFraming(w http.ResponseWriter, r *http.Request, ref *reply.Reply) {
	if isGRPC(r) {
		ref.GRPC(w, 0)
		return
	}
	ref.HTTP(w, 0)
}
