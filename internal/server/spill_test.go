package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/spill"
)

// Issue 24 point 4: a response longer than response_buffer whose client
// reads slower than the backend sends (a write to it stalls) has its rest
// held on disk (server.spill, limits.response_spill), so a slow reader
// holds neither the slot nor the backend connection, on either engine.

// spillSize is more than the sockets' buffers between levee and a client
// that reads nothing hold (up to 4 MiB sent, a 4 KiB receive buffer), and
// the default limits.response_spill: held on disk on the defaults.
const spillSize = 8 << 20

// patternBackend answers GET /big with n bytes that differ from offset to
// offset, so a byte lost or repeated across memory and file shows.
type patternBackend struct {
	*httptest.Server
	body     []byte
	requests atomic.Int64
}

func newPatternBackend(t *testing.T, n int) *patternBackend {
	b := &patternBackend{body: make([]byte, n)}
	for i := range b.body {
		b.body[i] = byte(i*7 + i>>11)
	}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(b.body)))
			w.Write(b.body)
			return
		}
		io.WriteString(w, "pong")
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *patternBackend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// spillConfig is oneSlot with server.spill in dir, plus spill settings.
func spillConfig(backend, limits, dir, spill string) string {
	return oneSlot(backend, limits) + fmt.Sprintf("server: {spill: {dir: %s%s}}\n", dir, spill)
}

// expectSpilled waits until p has spilled one response of spillSize and
// given back its slot, then checks that what the client's socket took
// before its writes stalled streamed and the rest is on disk, unlinked
// from dir, and that others are served meanwhile (what).
func expectSpilled(t *testing.T, p *proxy, dir, what string) {
	t.Helper()
	waitFor(t, "the response to be spilled and the slot given back", func() bool {
		return p.metric("levee_spilled_total", nil) == 1 && p.metric("levee_inflight", map[string]string{"app": "photos"}) == 0
	})
	if got := p.metric("levee_spill_bytes", nil); got <= 0 || got >= spillSize {
		t.Fatalf("levee_spill_bytes = %v; want the rest of the %d-byte response after what streamed", got, spillSize)
	}
	expectEmptyDir(t, dir)
	expectServed(t, p, 5, what)
}

func expectEmptyDir(t *testing.T, dir string) {
	t.Helper()
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Fatalf("spill dir holds %d entries (%v); want none: files are unlinked at creation", len(es), err)
	}
}

// A slow reader of a response past response_buffer does not hold the app's
// only slot: once a write to it stalls, the rest of the response is
// spilled, and the client then reads it whole, byte for byte.
func TestSlowReaderPastTheBufferHoldsNoSlot(t *testing.T) {
	skipOnH2C(t, "raw HTTP/1.1 client; TestSlowReaderPastTheBufferHoldsNoSlotOverH2 is the h2 case")
	be := newPatternBackend(t, spillSize)
	dir := t.TempDir()
	p := startProxy(t, spillConfig(be.addr(), "", dir, ""))
	c := slowReader(t, p)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: photos.test\r\n\r\n")
	expectSpilled(t, p, dir, "while a client reads a spilled response slowly")
	c.(*net.TCPConn).SetReadBuffer(1 << 20) // now read it at loopback speed
	c.SetReadDeadline(time.Now().Add(guard))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(got, be.body) {
		t.Fatalf("slow reader got %d bytes (%v), equal: %v; want the backend's %d exactly", len(got), err, bytes.Equal(got, be.body), len(be.body))
	}
	waitFor(t, "the file and buffer given back", func() bool {
		return p.metric("levee_spill_bytes", nil) == 0 && p.metric("levee_buffer_bytes", nil) == 0
	})
}

// Over HTTP/2 a slow reader is one that gives the stream little
// flow-control window: net/http's write waits for more, and the rest of
// the response is spilled as on HTTP/1.1. The client then reads it whole.
func TestSlowReaderPastTheBufferHoldsNoSlotOverH2(t *testing.T) {
	be := newPatternBackend(t, spillSize)
	dir := t.TempDir()
	p := startProxy(t, spillConfig(be.addr(), "", dir, "")+"listen: [{addr: 127.0.0.1:0, h2c: true}]\n")
	c := dialProxy(t, p)
	c.SetDeadline(time.Now().Add(guard))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	const window = 16 << 10 // the stream's only window until the spill
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "photos.test"}, {":path", "/big"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	expectSpilled(t, p, dir, "while an HTTP/2 client reads a spilled response slowly")
	// Now read it all, granting window as it comes.
	fr.WriteWindowUpdate(0, spillSize)
	fr.WriteWindowUpdate(1, spillSize)
	var got []byte
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got = append(got, f.Data()...)
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset (%v) after %d bytes", f.ErrCode, len(got))
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY (%v) after %d bytes", f.ErrCode, len(got))
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) && f.Header().Type == http2.FrameData {
			break
		}
	}
	if !bytes.Equal(got, be.body) {
		t.Fatalf("slow reader got %d bytes, equal: %v; want the backend's %d exactly", len(got), bytes.Equal(got, be.body), len(be.body))
	}
	waitFor(t, "the file and buffer given back", func() bool {
		return p.metric("levee_spill_bytes", nil) == 0 && p.metric("levee_buffer_bytes", nil) == 0
	})
}

// A response the spill refuses streams as it did before the spill, holding
// the slot while its client reads nothing, and the refusal is counted.
func TestSlowReaderPastTheSpillHoldsTheSlot(t *testing.T) {
	for _, tc := range []struct {
		name, limits, spill, reason string
	}{
		{"off for the app", ", response_spill: 0", "", spill.ReasonOff},
		{"off for the server", "", ", budget: 0", spill.ReasonOff},
		{"over the cap", ", response_spill: 1MiB", "", spill.ReasonSize},
		{"budget spent", "", ", budget: 1MiB", spill.ReasonBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skipOnH2C(t, "raw HTTP/1.1 client: the spill is the HTTP/1.1 engine's")
			be := newPatternBackend(t, spillSize)
			p := startProxy(t, spillConfig(be.addr(), tc.limits, t.TempDir(), tc.spill))
			c := slowReader(t, p)
			fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: photos.test\r\n\r\n")
			waitFor(t, "the refusal to be counted", func() bool {
				return p.metric("levee_spill_refused_total", map[string]string{"reason": tc.reason}) == 1
			})
			if p.metric("levee_spilled_total", nil) != 0 {
				t.Fatal("the response was spilled too")
			}
			resp := p.get("photos.test", "/ping")
			readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("another request got %d %s; want 503: the streamed response holds the only slot", resp.StatusCode, resp.Header.Get(reply.Reject))
			}
			c.(*net.TCPConn).SetReadBuffer(1 << 20)
			c.SetReadDeadline(time.Now().Add(guard))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			if !bytes.Equal(got, be.body) {
				t.Fatalf("streamed reader got %d bytes; want the backend's %d exactly", len(got), len(be.body))
			}
			waitFor(t, "the slot back", func() bool { return p.metric("levee_inflight", map[string]string{"app": "photos"}) == 0 })
			expectServed(t, p, 1, "after the streamed response")
		})
	}
}

// A slow reader of a spilled response is still cut at server.min_rate,
// and its file is closed and its budget given back.
func TestSlowReaderOfASpillIsCutAtMinRate(t *testing.T) {
	skipOnH2C(t, "raw HTTP/1.1 client")
	be := newPatternBackend(t, spillSize)
	p := startProxy(t, oneSlot(be.addr(), "")+
		fmt.Sprintf("server: {min_rate: 64KiB/s, min_rate_grace: 300ms, spill: {dir: %s}}\n", t.TempDir()))
	c := slowReader(t, p)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: photos.test\r\n\r\n")
	waitFor(t, "the slow reader to be cut off", func() bool {
		return p.metric("levee_rejected_total", map[string]string{"reason": reply.MinRate}) == 1
	})
	if p.metric("levee_spilled_total", nil) != 1 {
		t.Fatal("the response was not spilled")
	}
	waitFor(t, "the file and buffer given back", func() bool {
		return p.metric("levee_spill_bytes", nil) == 0 && p.metric("levee_buffer_bytes", nil) == 0
	})
}
