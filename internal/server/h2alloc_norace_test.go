//go:build !race

package server

import (
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/admit"
)

// The allocations of one proxied h2 request, levee's alone (h2rig), are
// held where issue 19 left them: served, 4 (the request's scope, which
// holds its ResponseWriter, context, body and the handler's http.Request;
// the response fields' string and slice; the backend connection's body);
// refused, 1 (the scope). The handler's http.Request was an object of
// its own until 00e6dea: 5 and 2.
// A client's deadline (grpc-timeout) adds none, nor, as a rule, a
// request body. Allocations are counted for the whole
// process: the client and backend of h2rig allocate nothing per request.
func TestH2AllocationsPerRequest(t *testing.T) {
	grpc := []hpack.HeaderField{{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}
	for _, c := range []struct {
		name, limits string
		fields       []hpack.HeaderField
		hold         bool // the app's only slot
		body         bool // a POST of rawBody
		max          float64
	}{
		{name: "served", max: 4},
		{name: "grpc", fields: grpc, max: 4},
		{name: "grpc-timeout", fields: append(grpc, hpack.HeaderField{Name: "grpc-timeout", Value: "10S"}), max: 4},
		// 4 as a rule (the DATA frame comes in the HEADERS' segment, and is
		// in before the handler reads); 6 if the handler has to wait for
		// it: the reader's wake channel and its read deadline's timer.
		{name: "post", body: true, max: 6},
		{name: "refused-rate", limits: "limits: {rate: 1/m, burst: 1}", max: 1},
		{name: "refused-queue", limits: "limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}}", hold: true, max: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newH2Rig(t, c.limits)
			r.fields = append(r.fields, c.fields...)
			if c.body {
				r.body = []byte(rawBody)
			}
			if c.hold {
				mustAcquire(t, r.p.srv.view("a").Limiter, admit.Ticket{})
			}
			r.get(t) // warms the pools, spends a burst
			r.get(t)
			served := c.limits == ""
			allocs := testing.AllocsPerRun(200, func() {
				if st, n := r.get(t); (st == 0x88) != served || n == 0 {
					t.Fatalf("status %#x, %d bytes; want served %v", st, n, served)
				}
			})
			t.Logf("%v allocations per request", allocs)
			if allocs > c.max {
				t.Fatalf("%v allocations per request, want at most %v", allocs, c.max)
			}
		})
	}
}
