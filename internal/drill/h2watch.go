package drill

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// HTTP/2 frame types and the client's connection preface (RFC 9113).
const (
	h2FrameHeaders   = 0x1
	h2FrameRSTStream = 0x3
	h2FrameGoAway    = 0x7
	h2PrefaceLen     = len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
)

// h2ErrCodes names the error codes of RST_STREAM and GOAWAY.
var h2ErrCodes = []string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
	"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
	"COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}

func h2ErrName(code uint32) string {
	if int(code) < len(h2ErrCodes) {
		return h2ErrCodes[code]
	}
	return fmt.Sprintf("0x%x", code)
}

// h2Watch reads the frames of every HTTP/2 connection a doer dials, both
// ways, as they pass: which streams the client began on each, whether
// the edge sent a GOAWAY and naming which last stream, which streams it
// reset, and who ended the connection. It is what tells, without the
// edge's help, whether a drain was polite and which process served a
// stream: a process that sends a GOAWAY is draining, and a stream above
// its last one was never its. Safe for concurrent use; since is the
// drill's time base.
type h2Watch struct {
	since func() time.Duration
	mu    sync.Mutex
	conns []*h2Conn
}

// wrap watches c, a connection just dialed (TLS already handshaken).
func (w *h2Watch) wrap(c net.Conn) net.Conn {
	wc := &h2Conn{Conn: c, w: w, dialed: w.since(), out: frameReader{skip: h2PrefaceLen}, resets: map[uint32]int64{}}
	w.mu.Lock()
	w.conns = append(w.conns, wc)
	w.mu.Unlock()
	return wc
}

// Who ended a watched connection.
const (
	h2Open   = iota
	h2Client // the client closed it (idle, after a GOAWAY, or at the end)
	h2Server // its reads failed first: the edge closed or reset it
)

// h2Conn is a watched connection. Its fields past Conn are under w.mu.
type h2Conn struct {
	net.Conn
	w        *h2Watch
	dialed   time.Duration
	in, out  frameReader // the edge's frames, the client's frames
	streams  []h2Stream  // in the order begun, so by id
	goAway   bool
	goAwayAt time.Duration
	last     uint32 // the GOAWAY's last stream id (the least, if more came)
	code     uint32 // the first GOAWAY's error code
	resets   map[uint32]int64
	above    int64 // the edge's HEADERS on a stream above its GOAWAY's last
	end      int
	endAt    time.Duration
	endErr   string
}

// h2Stream is a stream the client began. (One it begins after a GOAWAY
// came, before it has read it, is above the last and sent again.)
type h2Stream struct {
	id uint32
	at time.Duration
}

func (c *h2Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.in.feed(p[:n], c.fromEdge)
	if err != nil && c.end == h2Open {
		c.end, c.endAt, c.endErr = h2Server, c.w.since(), err.Error()
	}
	return n, err
}

func (c *h2Conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.w.mu.Lock()
	c.out.feed(p[:n], c.fromClient)
	c.w.mu.Unlock()
	return n, err
}

func (c *h2Conn) Close() error {
	c.w.mu.Lock()
	if c.end == h2Open {
		c.end, c.endAt = h2Client, c.w.since()
	}
	c.w.mu.Unlock()
	return c.Conn.Close()
}

// fromEdge notes a frame the edge sent; w.mu is held.
func (c *h2Conn) fromEdge(typ byte, id uint32, payload []byte) {
	switch {
	case typ == h2FrameGoAway && len(payload) >= 8:
		last := be32(payload) &^ (1 << 31)
		if !c.goAway {
			c.goAway, c.goAwayAt, c.last, c.code = true, c.w.since(), last, be32(payload[4:])
		}
		c.last = min(c.last, last)
	case typ == h2FrameRSTStream && id != 0 && len(payload) >= 4:
		c.resets[be32(payload)]++
	case typ == h2FrameHeaders && c.goAway && id > c.last:
		c.above++
	}
}

// fromClient notes a frame the client sent; w.mu is held. A HEADERS
// frame on a stream id above every one before begins a stream.
func (c *h2Conn) fromClient(typ byte, id uint32, _ []byte) {
	if typ != h2FrameHeaders || id == 0 {
		return
	}
	if n := len(c.streams); n > 0 && id <= c.streams[n-1].id {
		return // trailers
	}
	c.streams = append(c.streams, h2Stream{id: id, at: c.w.since()})
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// frameReader splits a byte stream into HTTP/2 frames as it passes,
// keeping only the start of the payloads it needs (GOAWAY's and
// RST_STREAM's). The zero value starts at a frame; skip bytes are
// dropped first (the client's preface).
type frameReader struct {
	skip int
	hdr  [9]byte
	hn   int // header bytes read
	left int // payload bytes left of the frame
	keep []byte
}

// feed reads p, calling on for each frame completed in it.
func (r *frameReader) feed(p []byte, on func(typ byte, id uint32, payload []byte)) {
	for len(p) > 0 {
		if r.skip > 0 {
			n := min(r.skip, len(p))
			r.skip, p = r.skip-n, p[n:]
			continue
		}
		if r.hn < len(r.hdr) {
			n := copy(r.hdr[r.hn:], p)
			r.hn, p = r.hn+n, p[n:]
			if r.hn < len(r.hdr) {
				return
			}
			r.left, r.keep = int(r.hdr[0])<<16|int(r.hdr[1])<<8|int(r.hdr[2]), r.keep[:0]
		}
		want := 0
		switch r.hdr[3] {
		case h2FrameGoAway:
			want = 8
		case h2FrameRSTStream:
			want = 4
		}
		n := min(r.left, len(p))
		if k := want - len(r.keep); k > 0 {
			r.keep = append(r.keep, p[:min(k, n)]...)
		}
		r.left, p = r.left-n, p[n:]
		if r.left == 0 {
			on(r.hdr[3], be32(r.hdr[5:])&^(1<<31), r.keep)
			r.hn = 0
		}
	}
}

// h2Tally is what the watch saw over a drill, phased by its runs.
type h2Tally struct {
	Conns         int              // connections dialed
	GoAways       int              // connections that got a GOAWAY
	GoAwaysByRun  []int            // GOAWAYs that came in each run's phase
	NoGoAway      int              // connections the edge ended without a GOAWAY
	FirstNoGoAway string           // how the first of those ended
	Resets        map[string]int64 // RST_STREAM from the edge, by code
	Streams       int64            // streams the client began
	AfterHandover int64            // of those, begun after their run's first GOAWAY
	OnNew         int64            // ... on a connection opened after it
	OldAdmitted   int64            // ... on a connection that got a GOAWAY, at or below its last
	Retried       int64            // streams above a GOAWAY's last: not processed, sent again
	AnsweredAbove int64            // the edge's answers on streams above its GOAWAY's last
	StrayOld      int              // connections opened after a handover that the old side ended
	ErrGoAways    map[string]int64 // GOAWAYs with an error code, by code
}

// tally phases what the watch saw by runs: run k's handover is the first
// GOAWAY that came between its start and the next run's; a connection
// opened after it must be the new process's, so it must not get a GOAWAY
// (nor be ended) before the next run starts.
func (w *h2Watch) tally(runs []commandRun) h2Tally {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := h2Tally{Conns: len(w.conns), GoAwaysByRun: make([]int, len(runs)), Resets: map[string]int64{},
		ErrGoAways: map[string]int64{}}
	runOf := func(at time.Duration) int { // 0-based; -1 before the first
		return sort.Search(len(runs), func(i int) bool { return runs[i].Start > at }) - 1
	}
	nextStart := func(k int) time.Duration {
		if k+1 < len(runs) {
			return runs[k+1].Start
		}
		return 1<<63 - 1
	}
	handover := make([]time.Duration, len(runs))
	for k := range handover {
		handover[k] = -1
	}
	for _, c := range w.conns {
		if c.goAway {
			if k := runOf(c.goAwayAt); k >= 0 {
				t.GoAwaysByRun[k]++
				if handover[k] < 0 || c.goAwayAt < handover[k] {
					handover[k] = c.goAwayAt
				}
			}
		}
	}
	for _, c := range w.conns {
		for code, n := range c.resets {
			t.Resets[h2ErrName(code)] += n
		}
		if c.goAway {
			t.GoAways++
			if c.code != 0 {
				t.ErrGoAways[h2ErrName(c.code)]++
			}
		} else if c.end == h2Server {
			t.NoGoAway++
			if t.FirstNoGoAway == "" {
				t.FirstNoGoAway = fmt.Sprintf("opened at %v, ended at %v: %s", c.dialed.Round(time.Millisecond),
					c.endAt.Round(time.Millisecond), c.endErr)
			}
		}
		t.AnsweredAbove += c.above
		k := runOf(c.dialed)
		if k >= 0 && handover[k] >= 0 && c.dialed > handover[k] {
			// opened after run k's handover: the new process's
			ended := c.goAway && c.goAwayAt < nextStart(k) || c.end == h2Server && c.endAt < nextStart(k)
			if ended {
				t.StrayOld++
			}
		}
		for _, s := range c.streams {
			t.Streams++
			above := c.goAway && s.id > c.last
			if above {
				t.Retried++
			}
			k := runOf(s.at)
			if k < 0 || handover[k] < 0 || s.at <= handover[k] {
				continue
			}
			t.AfterHandover++
			switch {
			case c.dialed > handover[k]:
				t.OnNew++
			case c.goAway && !above:
				t.OldAdmitted++
			}
		}
	}
	return t
}

// h2Checks grades the tally: the edge ended every HTTP/2 connection it
// ended with a GOAWAY, reset no stream, and after each handover no new
// stream went to the old process.
func h2Checks(t h2Tally) []Check {
	polite := Check{Name: "every HTTP/2 connection the edge ended had a GOAWAY", Pass: t.NoGoAway == 0,
		Got:  fmt.Sprintf("%d connections: %d got a GOAWAY, %d ended by the edge without one", t.Conns, t.GoAways, t.NoGoAway),
		Want: "0 without"}
	if t.NoGoAway > 0 {
		polite.Got += "; the first " + t.FirstNoGoAway
	}
	if len(t.ErrGoAways) > 0 {
		polite.Pass = false
		polite.Got += "; GOAWAY with an error: " + byName(t.ErrGoAways)
	}
	var resets int64
	for _, n := range t.Resets {
		resets += n
	}
	reset := Check{Name: "no HTTP/2 stream reset or refused by the edge", Pass: resets == 0,
		Got: fmt.Sprint(resets), Want: "0 RST_STREAM"}
	if resets > 0 {
		reset.Got += " (" + byName(t.Resets) + ")"
	}
	served := Check{Name: "HTTP/2 streams after a handover went to the new process",
		Pass: t.AnsweredAbove == 0 && t.StrayOld == 0,
		Got: fmt.Sprintf("%d begun after a handover: %d on new connections, %d admitted by the old one before "+
			"its GOAWAY; %d above a GOAWAY's last stream (sent again); %d answered above it; %d new "+
			"connections the old one ended",
			t.AfterHandover, t.OnNew, t.OldAdmitted, t.Retried, t.AnsweredAbove, t.StrayOld),
		Want: "0 answered above a GOAWAY's last, 0 new connections ended by the old"}
	return []Check{polite, reset, served}
}

// byName lists counts by name, sorted: "CANCEL: 2, REFUSED_STREAM: 5".
func byName(m map[string]int64) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
