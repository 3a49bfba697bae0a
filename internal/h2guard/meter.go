package h2guard

import (
	"sync/atomic"
	"time"
)

// Reason names the bound a connection crossed; it is the label of the
// guard's metric. The zero value means none.
type Reason string

// The bounds, one per kind of flood.
const (
	ReasonReset        Reason = "rst_stream"          // rapid reset (CVE-2023-44487)
	ReasonPing         Reason = "ping"                // CVE-2019-9512
	ReasonSettings     Reason = "settings"            // CVE-2019-9515
	ReasonEmptyData    Reason = "empty_data"          // CVE-2019-9518
	ReasonWindowUpdate Reason = "window_update"       // more updates than data sent could explain
	ReasonSmallWindow  Reason = "small_window_update" // zero-window dribble (CVE-2019-9511)
	ReasonPriority     Reason = "priority"            // CVE-2019-9513
	ReasonUnknown      Reason = "unknown_frame"       // frames of extension types
	ReasonContinuation Reason = "continuation"        // CONTINUATION flood (CVE-2023-45288)
	ReasonStreamError  Reason = "stream_error"        // streams the server reset for the client's errors: MadeYouReset (CVE-2025-8671)
)

// Reasons returns every Reason, for metrics that want all label values.
func Reasons() []Reason {
	return []Reason{ReasonReset, ReasonStreamError, ReasonPing, ReasonSettings, ReasonEmptyData,
		ReasonWindowUpdate, ReasonSmallWindow, ReasonPriority, ReasonUnknown, ReasonContinuation}
}

// Rate is a token bucket: Burst frames at once, then one more each Every.
type Rate struct {
	Burst int
	Every time.Duration
}

// Limits are the bounds of one connection; Default returns levee's. A
// zero Rate bounds nothing; a zero count lets no frame of its kind pass.
type Limits struct {
	// Resets bounds the client's streams that end in a reset: RST_STREAM
	// frames from the client (ReasonReset), and those the server writes
	// for the client's stream errors (Sent.Resets, ReasonStreamError),
	// which cost it the same. Each response the server starts (a HEADERS
	// frame it sends) gives one back: a client may cancel as many streams
	// as it lets be answered.
	Resets Rate
	// InFlightResets is how many of the server's STREAM_CLOSED resets on a
	// stream it ended on its own (RST_STREAM NO_ERROR, CANCEL or
	// INTERNAL_ERROR) are not counted in Resets: they answer the DATA the
	// client had in flight. It holds for the last 8 streams so ended.
	InFlightResets int
	// Pings bounds PING frames (not ACKs) that arrive before the server
	// has sent any DATA or HEADERS since the previous one; a PING that
	// follows some is free (the client is measuring a live transfer).
	Pings Rate
	// Settings bounds SETTINGS frames (not ACKs).
	Settings Rate
	// EmptyData bounds DATA frames that carry no data (padding at most)
	// and do not end their stream.
	EmptyData Rate
	// WindowUpdates is how many WINDOW_UPDATE frames the client may send
	// beyond WindowUpdatesPerData per DATA frame the server sent and two
	// per stream the client opened.
	WindowUpdates        int
	WindowUpdatesPerData int
	// SmallWindowUpdates bounds WINDOW_UPDATE frames whose increment is
	// below SmallIncrement: opening a window a few bytes at a time makes
	// the server send a frame per few bytes.
	SmallWindowUpdates Rate
	SmallIncrement     uint32
	// Priority bounds PRIORITY frames, Unknown frames of types the server
	// does not know (which it must ignore, RFC 9113 §4.1).
	Priority, Unknown Rate
	// HeaderBlockBytes and HeaderBlockFrames bound one header block: the
	// payload bytes of its HEADERS and CONTINUATION frames, and how many
	// CONTINUATION frames follow its HEADERS.
	HeaderBlockBytes  int
	HeaderBlockFrames int
}

// Default returns levee's bounds for a server whose header lists are at
// most maxHeaderBytes (server.max_header_bytes).
func Default(maxHeaderBytes int) Limits {
	// Go's server drops a connection whose header block passes twice its
	// header list limit; a client that fills 16 KiB frames (the default
	// SETTINGS_MAX_FRAME_SIZE) needs block/16 KiB CONTINUATION frames,
	// and nghttp2 allows 8 to any block.
	block := 2*maxHeaderBytes + 16<<10
	return Limits{
		Resets:               Rate{Burst: 1000, Every: 30 * time.Millisecond}, // nghttp2: 1000, 33/s
		InFlightResets:       256,                                             // net/http's 1 MiB stream window in 4 KiB DATA frames (clients send 16 KiB)
		Pings:                Rate{Burst: 100, Every: 100 * time.Millisecond},
		Settings:             Rate{Burst: 100, Every: 100 * time.Millisecond},
		EmptyData:            Rate{Burst: 100, Every: 100 * time.Millisecond},
		WindowUpdates:        1000,
		WindowUpdatesPerData: 10, // Envoy's max_inbound_window_update_frames_per_data_frame_sent
		SmallWindowUpdates:   Rate{Burst: 1000, Every: 10 * time.Millisecond},
		SmallIncrement:       1024,
		Priority:             Rate{Burst: 1000, Every: 10 * time.Millisecond},
		Unknown:              Rate{Burst: 1000, Every: 10 * time.Millisecond},
		HeaderBlockBytes:     block,
		HeaderBlockFrames:    8 + block/(16<<10),
	}
}

// Clock tells the time; levee's clock.Clock is one.
type Clock interface{ Now() time.Time }

// Sent counts what the server has written on a connection. The writer
// adds, the meter reads: its fields are atomic.
type Sent struct {
	Frames  atomic.Uint64 // all frames
	Data    atomic.Uint64 // DATA frames
	Headers atomic.Uint64 // HEADERS frames
	// Resets are RST_STREAM frames for the client's stream errors: the
	// server ended a stream because of what the client sent on it.
	Resets atomic.Uint64
}

// frame counts an outbound frame.
func (s *Sent) frame(f Frame) {
	s.Frames.Add(1)
	switch f.Type {
	case typeData:
		s.Data.Add(1)
	case typeHeaders:
		s.Headers.Add(1)
	}
}

// Meter counts the frames a client sends on one connection against
// Limits. It is the algorithm alone: it sees frames, not bytes, and
// closes nothing. Not safe for concurrent use, except that sent may be
// added to while Frame runs.
type Meter struct {
	lim   *Limits
	clk   Clock
	start time.Time
	sent  *Sent

	resets, pings, settings, empty, small, priority, unknown bucket

	pingMark  uint64 // sent frames at the last PING
	resetMark uint64 // sent HEADERS already given back as resets
	faultMark uint64 // sent resets already counted

	streams, updates uint64
	maxStream        uint32 // the highest stream the client opened

	inBlock     bool // a header block waits for its END_HEADERS
	blockBytes  int
	blockFrames int
}

// NewMeter returns a meter of lim (which it keeps and never changes) that
// reads sent and the time from clk.
func NewMeter(lim *Limits, clk Clock, sent *Sent) *Meter {
	m := new(Meter)
	m.init(lim, clk, sent)
	return m
}

func (m *Meter) init(lim *Limits, clk Clock, sent *Sent) {
	*m = Meter{lim: lim, clk: clk, start: clk.Now(), sent: sent}
}

// Streams is how many streams the client has opened.
func (m *Meter) Streams() uint64 { return m.streams }

// MaxStream is the highest stream id the client has opened.
func (m *Meter) MaxStream() uint32 { return m.maxStream }

// Frame counts one frame from the client, and the resets the server has
// written for the client's errors since the previous frame, and returns
// the bound it crossed, or "" if none. It reads the clock only for the
// kinds of frame that have a rate, and for new resets.
func (m *Meter) Frame(f Frame) Reason {
	if n := m.sent.Resets.Load(); n != m.faultMark {
		// Counted as the client's next frame arrives: the reset answered
		// an earlier one, and a client that sends nothing more costs
		// nothing more.
		m.giveBackResets()
		k := n - m.faultMark
		m.faultMark = n
		if !m.resets.takeN(int64(m.clk.Now().Sub(m.start)), m.lim.Resets, k) {
			return ReasonStreamError
		}
	}
	switch f.Type {
	case typeData:
		if f.emptyData() {
			return m.take(&m.empty, m.lim.EmptyData, ReasonEmptyData)
		}
	case typeHeaders:
		if f.Stream > m.maxStream {
			m.maxStream = f.Stream
			m.streams++
		}
		m.inBlock = f.Flags&flagEndHeaders == 0
		m.blockBytes, m.blockFrames = int(f.Length), 0
		if m.blockBytes > m.lim.HeaderBlockBytes {
			return ReasonContinuation
		}
	case typeContinuation:
		if !m.inBlock {
			return "" // out of order: the server's connection error
		}
		m.inBlock = f.Flags&flagEndHeaders == 0
		m.blockBytes += int(f.Length)
		m.blockFrames++
		if m.blockBytes > m.lim.HeaderBlockBytes || m.blockFrames > m.lim.HeaderBlockFrames {
			return ReasonContinuation
		}
	case typePriority:
		return m.take(&m.priority, m.lim.Priority, ReasonPriority)
	case typeRSTStream:
		m.giveBackResets()
		return m.take(&m.resets, m.lim.Resets, ReasonReset)
	case typeSettings:
		if f.Flags&flagAck == 0 {
			return m.take(&m.settings, m.lim.Settings, ReasonSettings)
		}
	case typePing:
		if f.Flags&flagAck != 0 {
			return ""
		}
		if s := m.sent.Data.Load() + m.sent.Headers.Load(); s != m.pingMark {
			m.pingMark = s
			return ""
		}
		return m.take(&m.pings, m.lim.Pings, ReasonPing)
	case typeWindowUpdate:
		m.updates++
		allowed := uint64(m.lim.WindowUpdates) + 2*m.streams + uint64(m.lim.WindowUpdatesPerData)*m.sent.Data.Load()
		if m.updates > allowed {
			return ReasonWindowUpdate
		}
		if f.increment() < m.lim.SmallIncrement {
			return m.take(&m.small, m.lim.SmallWindowUpdates, ReasonSmallWindow)
		}
	case typePushPromise, typeGoAway:
		// A client's PUSH_PROMISE is the server's connection error; one
		// GOAWAY ends the client's side.
	default:
		return m.take(&m.unknown, m.lim.Unknown, ReasonUnknown)
	}
	return ""
}

// giveBackResets gives back a reset per response started since the last
// call.
func (m *Meter) giveBackResets() {
	if h := m.sent.Headers.Load(); h > m.resetMark {
		m.resets.giveBack(h-m.resetMark, m.lim.Resets.Every)
		m.resetMark = h
	}
}

// take spends one token of b at rate r, or returns why it cannot.
func (m *Meter) take(b *bucket, r Rate, why Reason) Reason {
	if b.take(int64(m.clk.Now().Sub(m.start)), r) {
		return ""
	}
	return why
}

// bucket is a token bucket kept as GCRA's theoretical arrival time, in
// nanoseconds since the meter started: full while tat <= now.
type bucket struct{ tat int64 }

// take spends one token at now if there is one.
func (b *bucket) take(now int64, r Rate) bool { return b.takeN(now, r, 1) }

// takeN spends n tokens at now if there are as many, and none if not.
func (b *bucket) takeN(now int64, r Rate, n uint64) bool {
	every := int64(r.Every)
	t := max(b.tat, now) + int64(min(n, 1<<20))*every
	if t-now > int64(r.Burst)*every {
		return false
	}
	b.tat = t
	return true
}

// giveBack returns n tokens; a full bucket stays full (take reads a tat in
// the past as now).
func (b *bucket) giveBack(n uint64, every time.Duration) {
	b.tat -= int64(min(n, 1<<20)) * int64(every)
}
