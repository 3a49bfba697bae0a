package server

// MadeYouReset (CVE-2025-8671, issue 24 point 2): a client that never
// sends RST_STREAM, but makes the server reset each stream it opens with a
// frame that is a stream error (RFC 9113 §5.4.2), gets rapid reset's work
// done for it. Each form floods one h2c connection, as h2flood_test.go
// does, and must end with the guard's GOAWAY ENHANCE_YOUR_CALM.

import (
	"context"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/h2guard"
)

const (
	// madeYouResetStreams is how many streams a flood opens at most: the
	// 100,000 of the measurement that found levee open to it.
	madeYouResetStreams = 100000
	// madeYouResetAhead is how many streams the flood writes beyond those
	// the server has answered. It keeps the flood's bytes after the GOAWAY
	// under what the guard reads and drops before it closes (1 MiB):
	// more, and the close resets the connection, which can destroy the
	// GOAWAY before the client reads it.
	madeYouResetAhead = 2048
)

func TestH2FloodMadeYouReset(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stream writes stream s: a request, and what makes the server
		// reset it.
		stream func(c *h2Client, s uint32) error
	}{
		// §6.9.1: a window over 2^31-1 is a stream error FLOW_CONTROL_ERROR.
		{"window overflow", func(c *h2Client, s uint32) error {
			if err := c.request(s, http.MethodGet, "/made", true); err != nil {
				return err
			}
			return c.fr.WriteWindowUpdate(s, 1<<31-1)
		}},
		// §5.1: DATA on a half-closed (remote) stream is STREAM_CLOSED.
		{"data after end stream", func(c *h2Client, s uint32) error {
			if err := c.request(s, http.MethodGet, "/made", true); err != nil {
				return err
			}
			return c.fr.WriteData(s, true, []byte("x"))
		}},
		// §5.3.1: a stream that depends on itself is PROTOCOL_ERROR.
		{"headers depending on their own stream", func(c *h2Client, s uint32) error {
			c.hbuf.Reset()
			for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "photos.test"}, {":path", "/made"}} {
				c.henc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
			}
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s, BlockFragment: c.hbuf.Bytes(),
				EndStream: true, EndHeaders: true, Priority: http2.PriorityParam{StreamDep: s, Weight: 15}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newFloodRig(t)
			rig.startBystander(t)
			c := dialH2(t, rig.addr)
			sent := c.floodN(madeYouResetStreams, func(i int) error {
				if i == 8 { // mid-flood, one request the test waits for
					if err := c.flush(); err == nil {
						if err := rig.bystand(context.Background()); err != nil {
							t.Errorf("during the flood: %v", err)
						}
					}
				}
				if i%1024 == 0 && i >= madeYouResetAhead {
					c.flush()
					waitFor(t, "the server to answer the flood", func() bool {
						return c.gotGoAway.Load() || c.rsts.Load() >= int64(i-madeYouResetAhead)
					})
				}
				return tc.stream(c, uint32(2*i+1))
			})
			g := c.wantGoAway()
			c.conn.Close()
			recv(t, c.readDone, "the flooding connection to end")
			rig.checkBystander(t)
			waitFor(t, "the flood metric", func() bool {
				return rig.p.metric("levee_h2_flood_closed_total", map[string]string{"reason": string(h2guard.ReasonStreamError)}) == 1
			})
			// As for rapid reset, the burst of resets and one more per
			// response the server started; and a margin for the resets the
			// server has made but not yet written, which the guard cannot
			// count: its reader yields to the writer when the server falls
			// behind, but the scheduler decides when the writer runs (at
			// most 234 more on two shared cores).
			lim := h2guard.Default(64 << 10)
			accepted := int64(g.LastStreamID+1) / 2
			if max := int64(lim.Resets.Burst) + c.responses.Load() + 512; accepted > max {
				t.Errorf("the server took %d streams, want at most the burst of resets, one per response and the margin (%d)", accepted, max)
			}
			// Every request that reached the backend is cancelled with its
			// stream: none is still held, and none was answered.
			waitFor(t, "the backend's requests to be cancelled", func() bool {
				return rig.madeLeft.Load() == rig.made.Load()
			})
			if n := rig.madeServed.Load(); n != 0 {
				t.Errorf("the backend answered %d reset requests, want none", n)
			}
			// A stream reset before it is forwarded never reaches the
			// backend; one on its way there may, and fewer than the app's
			// concurrency (1,024 by default) are ever on their way at once.
			if n := rig.made.Load(); n > accepted/10 {
				t.Errorf("the backend saw %d of the %d reset streams, want at most a tenth", n, accepted)
			}
			t.Logf("client wrote %d streams; the server took %d (%d responses) before the GOAWAY; the backend saw %d",
				sent, accepted, c.responses.Load(), rig.made.Load())
		})
	}
}
