package h2guard

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

func TestFaultsTellTheClientsErrors(t *testing.T) {
	const free = 2
	var r faults
	for i, step := range []struct {
		stream uint32
		code   http2.ErrCode
		want   bool // the client's fault
	}{
		{1, http2.ErrCodeProtocol, true},
		{3, http2.ErrCodeFlowControl, true},
		{5, http2.ErrCodeStreamClosed, true}, // DATA after END_STREAM
		{7, http2.ErrCodeFrameSize, true},
		{9, http2.ErrCodeRefusedStream, true},
		{11, http2.ErrCodeEnhanceYourCalm, true},
		// The server's own: a handler that answered before the request
		// ended, gave up, or failed.
		{13, http2.ErrCodeNo, false},
		{15, http2.ErrCodeCancel, false},
		{17, http2.ErrCodeInternal, false},
		// The client's DATA in flight on 13, as long as it is free.
		{13, http2.ErrCodeStreamClosed, false},
		{13, http2.ErrCodeStreamClosed, false},
		{13, http2.ErrCodeStreamClosed, true},
		{17, http2.ErrCodeStreamClosed, false},
		// Only STREAM_CLOSED is excused.
		{15, http2.ErrCodeFlowControl, true},
		{19, http2.ErrCodeStreamClosed, true},
	} {
		if got := r.reset(step.stream, uint32(step.code), free); got != step.want {
			t.Errorf("step %d: RST_STREAM %v on %d: client's fault %v, want %v", i, step.code, step.stream, got, step.want)
		}
	}
	// The slots are the last hangUpSlots streams ended: the oldest is
	// forgotten.
	for s := uint32(101); s < 101+2*hangUpSlots; s += 2 {
		r.reset(s, uint32(http2.ErrCodeNo), free)
	}
	if !r.reset(15, uint32(http2.ErrCodeStreamClosed), free) {
		t.Error("STREAM_CLOSED on a stream ended 8 hang-ups ago is excused, want counted")
	}
	if r.reset(101, uint32(http2.ErrCodeStreamClosed), free) {
		t.Error("STREAM_CLOSED on a stream just ended is counted, want excused")
	}
}

// serverOutput is what a server writes: a SETTINGS, and on streams 1 to
// 2n-1 a response and a reset, by turns the client's fault (counted) and
// not, with the client's DATA in flight after the latter.
func serverOutput(t testing.TB, n int) (out []byte, counted uint64) {
	t.Helper()
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	for i := range n {
		s := uint32(2*i + 1)
		switch i % 4 {
		case 0: // MadeYouReset: a window overflow
			fr.WriteRSTStream(s, http2.ErrCodeFlowControl)
			counted++
		case 1: // a handler that answered before reading the body
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s, BlockFragment: []byte{0x88}, EndHeaders: true})
			fr.WriteData(s, true, bytes.Repeat([]byte("d"), 100))
			fr.WriteRSTStream(s, http2.ErrCodeNo)
			fr.WriteWindowUpdate(0, 16384)
			fr.WriteRSTStream(s, http2.ErrCodeStreamClosed)
		case 2: // DATA after END_STREAM
			fr.WriteRSTStream(s, http2.ErrCodeStreamClosed)
			counted++
		case 3: // a handler that failed
			fr.WriteRSTStream(s, http2.ErrCodeInternal)
		}
	}
	return buf.Bytes(), counted
}

// discard is a net.Conn that takes every Write.
type discard struct{ net.Conn }

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestConnCountsServerResetsCutAnywhere(t *testing.T) {
	out, want := serverOutput(t, 40)
	opts := &Options{Limits: Default(64 << 10), Clock: &fakeClock{t: time.Unix(1e9, 0)}}
	// 1: every frame cut into bytes; 9, 13: a header, a whole reset, and
	// cuts through both; larger: several frames in one Write.
	for _, step := range []int{1, 2, 5, 9, 13, 17, 64, 4096, len(out)} {
		g := Wrap(discard{}, opts)
		for b := out; len(b) > 0; {
			n, err := g.Write(b[:min(step, len(b))])
			if err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		if got := g.sent.Resets.Load(); got != want {
			t.Errorf("writes of %d bytes: %d resets counted, want %d", step, got, want)
		}
		if got := g.Resets(); got != want {
			t.Errorf("writes of %d bytes: Resets() = %d, want %d", step, got, want)
		}
	}
}

func TestConnCountsServerResetsWithoutAllocating(t *testing.T) {
	out, _ := serverOutput(t, 40)
	opts := &Options{Limits: Default(64 << 10), Clock: &fakeClock{t: time.Unix(1e9, 0)}}
	g := Wrap(discard{}, opts)
	if n := testing.AllocsPerRun(100, func() {
		for b := out; len(b) > 0; b = b[min(7, len(b)):] {
			g.Write(b[:min(7, len(b))])
		}
	}); n != 0 {
		t.Errorf("%v allocations per run, want none", n)
	}
}

// TestConnServerResetsEndTheConnection: a client whose every stream the
// server resets for its errors gets the GOAWAY once the resets cross the
// bound, as one that resets them itself does.
func TestConnServerResetsEndTheConnection(t *testing.T) {
	for _, bufSize := range []int{7, 64, 4096} {
		a, b := net.Pipe()
		opts := &Options{Limits: Default(64 << 10), Clock: &fakeClock{t: time.Unix(1e9, 0)}}
		opts.Limits.Resets.Burst = 20
		served := resetServer(t, Wrap(b, opts), bufSize)
		go func() {
			a.SetWriteDeadline(time.Now().Add(10 * time.Second))
			fr := http2.NewFramer(a, nil)
			a.Write([]byte(http2.ClientPreface))
			fr.WriteSettings()
			for s := uint32(1); s < 1000; s += 2 {
				if fr.WriteWindowUpdate(s, 1<<31-1) != nil {
					return // the guard stopped reading
				}
			}
		}()
		a.SetReadDeadline(time.Now().Add(10 * time.Second))
		fr := http2.NewFramer(nil, a)
		fr.SetMaxReadFrameSize(1 << 20)
		resets := 0
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("buf %d: after %d resets, reading: %v (want whole frames, then a GOAWAY)", bufSize, resets, err)
			}
			if _, ok := f.(*http2.RSTStreamFrame); ok {
				resets++
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Errorf("buf %d: GOAWAY %v, want ENHANCE_YOUR_CALM", bufSize, g.ErrCode)
				}
				break
			}
		}
		// The server resets one stream per frame it reads; the guard
		// counts a reset as the next frame arrives.
		if burst := opts.Limits.Resets.Burst; resets < burst || resets > burst+2 {
			t.Errorf("buf %d: %d resets before the GOAWAY, want the burst (%d) and at most two more", bufSize, resets, burst)
		}
		a.Close()
		if err := <-served; err == nil {
			t.Errorf("buf %d: the server read on, want an error", bufSize)
		}
	}
}

// resetServer is a stand-in HTTP/2 server on a guarded connection that
// answers every WINDOW_UPDATE on a stream with RST_STREAM
// FLOW_CONTROL_ERROR, through a writer of bufSize bytes (see pingServer),
// and waits for each reset to be written before it reads on.
func resetServer(t *testing.T, g *Conn, bufSize int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(g, bufSize)
		wfr := http2.NewFramer(bw, nil)
		wfr.WriteSettings()
		bw.Flush()
		var preface [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(g, preface[:]); err != nil {
			done <- err
			return
		}
		fr := http2.NewFramer(nil, g)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID != 0 {
				wfr.WriteRSTStream(w.StreamID, http2.ErrCodeFlowControl)
				if bw.Flush() != nil {
					done <- nil
					return
				}
			}
		}
	}()
	return done
}

// TestMeterServerResetsShareTheBudget: the server's resets for the
// client's errors and the client's own draw from one bucket, and a
// response gives one back to both.
func TestMeterServerResetsShareTheBudget(t *testing.T) {
	m, _, sent := newTestMeter()
	burst := m.lim.Resets.Burst
	rst := Frame{Type: typeRSTStream, Stream: 1, Length: 4}
	ping := Frame{Type: typePing, Flags: flagAck, Length: 8} // counts nothing itself
	for range burst / 2 {
		if r := m.Frame(rst); r != "" {
			t.Fatalf("client reset refused: %q", r)
		}
	}
	sent.Resets.Add(uint64(burst - burst/2)) // the rest, at once
	if r := m.Frame(ping); r != "" {
		t.Fatalf("the server's resets up to the burst refused: %q", r)
	}
	sent.Headers.Add(1)
	sent.Resets.Add(1) // one response gave one back
	if r := m.Frame(ping); r != "" {
		t.Fatalf("a reset given back by a response refused: %q", r)
	}
	sent.Resets.Add(1)
	if r := m.Frame(ping); r != ReasonStreamError {
		t.Fatalf("a server reset past the budget: %q, want %q", r, ReasonStreamError)
	}
	if r := m.Frame(rst); r != ReasonReset {
		t.Fatalf("a client reset past the budget: %q, want %q", r, ReasonReset)
	}
}
