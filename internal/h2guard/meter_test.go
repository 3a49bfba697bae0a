package h2guard

import (
	"encoding/binary"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func newTestMeter() (*Meter, *fakeClock, *Sent) {
	lim := Default(64 << 10)
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	sent := new(Sent)
	return NewMeter(&lim, clk, sent), clk, sent
}

func windowUpdate(stream, inc uint32) Frame {
	f := Frame{Type: typeWindowUpdate, Stream: stream, Length: 4}
	binary.BigEndian.PutUint32(f.Prefix[:], inc)
	return f
}

// until feeds f until the meter refuses one and returns how many passed.
func until(t *testing.T, m *Meter, f Frame, max int) (int, Reason) {
	t.Helper()
	for i := range max {
		if r := m.Frame(f); r != "" {
			return i, r
		}
	}
	return max, ""
}

func TestMeterRates(t *testing.T) {
	lim := Default(64 << 10)
	for _, tc := range []struct {
		name string
		f    Frame
		rate Rate
		want Reason
	}{
		{"rst_stream", Frame{Type: typeRSTStream, Stream: 1, Length: 4}, lim.Resets, ReasonReset},
		{"ping", Frame{Type: typePing, Length: 8}, lim.Pings, ReasonPing},
		{"settings", Frame{Type: typeSettings}, lim.Settings, ReasonSettings},
		{"empty data", Frame{Type: typeData, Stream: 1}, lim.EmptyData, ReasonEmptyData},
		{"padded empty data", Frame{Type: typeData, Flags: flagPadded, Stream: 1, Length: 5, Prefix: [4]byte{4}}, lim.EmptyData, ReasonEmptyData},
		{"priority", Frame{Type: typePriority, Stream: 3, Length: 5}, lim.Priority, ReasonPriority},
		{"unknown", Frame{Type: 0xf0, Length: 3}, lim.Unknown, ReasonUnknown},
		{"small window update", windowUpdate(1, 1), lim.SmallWindowUpdates, ReasonSmallWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk, sent := newTestMeter()
			if tc.f.Type == typeWindowUpdate {
				sent.Data.Store(1 << 20) // the ratio bound stays out of the way
			}
			if n, r := until(t, m, tc.f, 100000); n != tc.rate.Burst || r != tc.want {
				t.Fatalf("%d frames passed, then %q; want %d, then %q", n, r, tc.rate.Burst, tc.want)
			}
			// Refilled at the rate: one token per Every, never more than the burst.
			clk.t = clk.t.Add(3 * tc.rate.Every)
			if n, _ := until(t, m, tc.f, 100000); n != 3 {
				t.Fatalf("after 3 intervals %d frames passed, want 3", n)
			}
			clk.t = clk.t.Add(time.Hour)
			if n, _ := until(t, m, tc.f, 100000); n != tc.rate.Burst {
				t.Fatalf("after an hour %d frames passed, want the burst, %d", n, tc.rate.Burst)
			}
		})
	}
}

func TestMeterFreeFrames(t *testing.T) {
	m, _, _ := newTestMeter()
	for _, f := range []Frame{
		{Type: typeData, Stream: 1, Length: 100},
		{Type: typeData, Stream: 1, Flags: flagEndStream},
		{Type: typeData, Stream: 1, Flags: flagPadded, Length: 5, Prefix: [4]byte{2}},
		{Type: typePing, Flags: flagAck, Length: 8},
		{Type: typeSettings, Flags: flagAck},
	} {
		if n, r := until(t, m, f, 10000); r != "" {
			t.Fatalf("%+v: refused after %d (%s); it costs the server nothing it did not ask for", f, n, r)
		}
	}
}

func TestMeterResetsGivenBackByResponses(t *testing.T) {
	m, _, sent := newTestMeter()
	rst := Frame{Type: typeRSTStream, Stream: 1, Length: 4}
	// A client that cancels every stream after its response started.
	for i := range 5000 {
		sent.Headers.Add(1)
		if r := m.Frame(rst); r != "" {
			t.Fatalf("reset %d after its response: %s", i, r)
		}
	}
	// Credit does not bank beyond the burst.
	sent.Headers.Add(1 << 20)
	if n, _ := until(t, m, rst, 100000); n != m.lim.Resets.Burst {
		t.Fatalf("%d resets passed after much credit, want the burst %d", n, m.lim.Resets.Burst)
	}
}

func TestMeterPingsFreeWhileTheServerSends(t *testing.T) {
	m, _, sent := newTestMeter()
	ping := Frame{Type: typePing, Length: 8}
	for i := range 10000 { // one PING per DATA frame, as a BDP estimator does
		sent.Data.Add(1)
		if r := m.Frame(ping); r != "" {
			t.Fatalf("ping %d after data: %s", i, r)
		}
	}
	if n, r := until(t, m, ping, 100000); n != m.lim.Pings.Burst || r != ReasonPing {
		t.Fatalf("%d pings passed without data, then %q; want %d", n, r, m.lim.Pings.Burst)
	}
}

func TestMeterWindowUpdatesAgainstData(t *testing.T) {
	m, _, sent := newTestMeter()
	wu := windowUpdate(1, 1<<16)
	if n, r := until(t, m, wu, 100000); n != m.lim.WindowUpdates || r != ReasonWindowUpdate {
		t.Fatalf("%d updates passed with no data sent, then %q; want %d", n, r, m.lim.WindowUpdates)
	}
	m, _, sent = newTestMeter()
	for i := range 100000 { // an update per DATA frame, for the stream and the connection
		sent.Data.Add(1)
		if r := m.Frame(wu); r != "" {
			t.Fatalf("update %d: %s", i, r)
		}
		if r := m.Frame(windowUpdate(0, 1<<16)); r != "" {
			t.Fatalf("connection update %d: %s", i, r)
		}
	}
}

func TestMeterHeaderBlocks(t *testing.T) {
	m, _, _ := newTestMeter()
	lim := m.lim
	headers := func(stream uint32, end bool, n uint32) Frame {
		f := Frame{Type: typeHeaders, Stream: stream, Length: n}
		if end {
			f.Flags = flagEndHeaders
		}
		return f
	}
	cont := func(end bool, n uint32) Frame {
		f := Frame{Type: typeContinuation, Stream: 1, Length: n}
		if end {
			f.Flags = flagEndHeaders
		}
		return f
	}
	// A header list at max_header_bytes in 16 KiB frames passes, many times.
	for s := uint32(1); s < 2000; s += 2 {
		m.Frame(headers(s, false, 16<<10))
		for range 3 {
			if r := m.Frame(cont(false, 16<<10)); r != "" {
				t.Fatalf("stream %d: %s", s, r)
			}
		}
		if r := m.Frame(cont(true, 100)); r != "" {
			t.Fatalf("stream %d end: %s", s, r)
		}
	}
	if m.MaxStream() != 1999 {
		t.Errorf("MaxStream %d, want 1999", m.MaxStream())
	}
	// Empty CONTINUATION frames: bounded in number.
	m.Frame(headers(2001, false, 10))
	if n, r := until(t, m, cont(false, 0), 100000); n != lim.HeaderBlockFrames || r != ReasonContinuation {
		t.Fatalf("%d empty CONTINUATION passed, then %q; want %d", n, r, lim.HeaderBlockFrames)
	}
	// Full ones: bounded in bytes.
	m, _, _ = newTestMeter()
	if r := m.Frame(headers(1, false, uint32(lim.HeaderBlockBytes))); r != "" {
		t.Fatalf("HEADERS of %d bytes: %q", lim.HeaderBlockBytes, r)
	}
	if r := m.Frame(cont(true, 1)); r != ReasonContinuation {
		t.Fatalf("a block of %d bytes: %q, want %q", lim.HeaderBlockBytes+1, r, ReasonContinuation)
	}
}
