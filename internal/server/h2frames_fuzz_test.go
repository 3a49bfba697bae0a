package server

// FuzzH2Frames (issue 24 point 7): the HTTP/2 frame layer a client drives,
// as levee's h2c listener (levee's HTTP/2 server, package h2, under
// h2guard) sees it.
// FuzzFramingHTTP2 fuzzes what one request's header block says; this one
// fuzzes sequences of frames of any type, flags, stream and payload, and
// checks properties of what comes back, not only that nothing panics.

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// The fuzzer's input is a list of frames, each written as four bytes and
// a payload: type, flags, sel, n, then n payload bytes (fewer if the input
// ends first). sel picks the stream and what else to do:
const (
	h2fzStreamMask = 0x07 // bits 0-2: the stream, h2fzStreams
	h2fzReserved   = 0x08 // set the stream id's reserved bit
	h2fzRequest    = 0x10 // append a header block: a GET of the stream's own path
	h2fzOversized  = 0x20 // the length field says 2^24-1 bytes: the last frame
	h2fzLoop       = 0x40 // repeat the frames since the previous loop or mark (this one included)
	h2fzMark       = 0x80 // the next loop starts after this frame
)

// Stream selectors (sel & h2fzStreamMask); the others are 1, 3 and 5.
const (
	h2fzSelZero = 0 // the connection
	h2fzSelNew  = 4 // a new stream: past the highest odd id so far
	h2fzSelLast = 5 // the last new stream (1 before the first)
	h2fzSelEven = 6 // 2, a server's id
	h2fzSelMax  = 7 // 2^31-1
)

// Bounds on one input, so that each runs in a few milliseconds.
const (
	h2fzLoops       = 64        // a loop's frames are written this many times in all
	h2fzMaxFrames   = 4096      // frames written, loops included
	h2fzMaxBytes    = 256 << 10 // bytes written
	h2fzMaxRequests = 128       // header blocks appended (h2fzRequest)
	// h2fzIdle is how long the client waits for streams still open
	// once the server has read everything (a request waiting for a body
	// it will never get, a window never opened): only coverage depends
	// on it.
	h2fzIdle = 20 * time.Millisecond
	// h2fzHang is how long the server has to read everything and answer,
	// or end the connection.
	h2fzHang = 5 * time.Second
)

// h2fzHost is the host of the fuzzer's app.
const h2fzHost = "frames.test"

// h2fzProbe is the PING the client sends after its frames: its ACK says
// the server has read them all.
var h2fzProbe = [8]byte{'l', 'e', 'v', 'e', 'e', 'f', 'z', 0}

// h2fzFrame is one frame to write.
type h2fzFrame struct {
	typ, flags uint8
	stream     uint32 // the reserved bit included
	payload    []byte
	oversized  bool
}

// h2fzOp is one frame as the input encodes it, its stream not yet chosen.
type h2fzOp struct {
	typ, flags, sel uint8
	payload         []byte
}

// h2fzEncode writes ops as the fuzzer's input (seeds).
func h2fzEncode(ops ...h2fzOp) []byte {
	var b []byte
	for _, o := range ops {
		if len(o.payload) > 255 {
			panic("h2fzEncode: payload over 255 bytes")
		}
		b = append(b, o.typ, o.flags, o.sel, byte(len(o.payload)))
		b = append(b, o.payload...)
	}
	return b
}

// h2fzDecode reads the input as ops; any input is some list of them.
func h2fzDecode(b []byte) []h2fzOp {
	var ops []h2fzOp
	for len(b) >= 4 {
		o := h2fzOp{typ: b[0], flags: b[1], sel: b[2]}
		n := min(int(b[3]), len(b)-4)
		o.payload, b = b[4:4+n], b[4+n:]
		ops = append(ops, o)
	}
	return ops
}

// h2fzPlan is what the client writes on one connection, and what it sent
// on each stream.
type h2fzPlan struct {
	frames []h2fzFrame
	// opened are the streams the client sent HEADERS on (odd ids only:
	// the others are the server's, or the connection).
	opened map[uint32]bool
	// paths are the streams the client asked for its own path on.
	paths map[uint32]bool
	// maxStream is the highest stream id of any frame.
	maxStream uint32
	// answered: every stream it opens must end, so the run waits for
	// them (up to h2fzHang), not only until h2fzIdle passes quiet. A
	// well-formed plan's answers may take longer than h2fzIdle on a
	// loaded machine.
	answered bool
}

// h2fzExpand turns ops into frames: streams chosen, header blocks
// appended, loops unrolled, within the bounds.
func h2fzExpand(ops []h2fzOp, nonce string) *h2fzPlan {
	p := &h2fzPlan{opened: map[uint32]bool{}, paths: map[uint32]bool{}}
	var hi, last uint32 = 0, 1 // the highest odd id used, the last new one
	requests, bytes := 0, 0
	emit := func(o h2fzOp) bool {
		if len(p.frames) >= h2fzMaxFrames || bytes >= h2fzMaxBytes {
			return false
		}
		var id uint32
		switch s := o.sel & h2fzStreamMask; s {
		case h2fzSelZero:
		case 1, 2, 3:
			id = uint32(2*s - 1)
		case h2fzSelNew:
			id = hi + 2
			if hi == 0 {
				id = 1
			}
			last = id
		case h2fzSelLast:
			id = last
		case h2fzSelEven:
			id = 2
		case h2fzSelMax:
			id = math.MaxInt32
		}
		if id%2 == 1 && id != math.MaxInt32 {
			hi = max(hi, id)
		}
		f := h2fzFrame{typ: o.typ, flags: o.flags, stream: id, oversized: o.sel&h2fzOversized != 0}
		f.payload = o.payload
		if o.sel&h2fzRequest != 0 && requests < h2fzMaxRequests {
			requests++
			f.payload = append(append([]byte(nil), o.payload...), h2fzBlock(h2fzPath(nonce, id))...)
			p.paths[id] = true
		}
		if o.sel&h2fzReserved != 0 {
			f.stream |= 1 << 31
		}
		p.maxStream = max(p.maxStream, id)
		if f.typ == uint8(http2.FrameHeaders) && id%2 == 1 {
			p.opened[id] = true
		}
		p.frames = append(p.frames, f)
		bytes += 9 + len(f.payload)
		return !f.oversized
	}
	start := 0 // the first op of the next loop
	for i, o := range ops {
		if !emit(o) {
			return p
		}
		if o.sel&h2fzMark != 0 {
			start = i + 1
		}
		if o.sel&h2fzLoop == 0 {
			continue
		}
		for range h2fzLoops - 1 {
			for _, r := range ops[min(start, i) : i+1] {
				if !emit(r) {
					return p
				}
			}
		}
		start = i + 1
	}
	return p
}

// h2fzPath is the path the client asks for on stream id: the backend
// answers with it. The nonce, new in each process, keeps an input from
// asking for another stream's path in a header block of its own: a
// stream's answer naming another stream's path is levee's mix-up.
func h2fzPath(nonce string, id uint32) string { return fmt.Sprintf("/fz/%s/%d", nonce, id) }

// h2fzBlock is a header block for a GET of path. Its fields are never
// indexed, so no later block can refer to them.
func h2fzBlock(path string) []byte {
	var b strings.Builder
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", h2fzHost}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	return []byte(b.String())
}

// bytes is the plan as written: each frame's header and payload. After
// an oversized frame nothing follows; else the probe PING does.
func (p *h2fzPlan) bytes() []byte {
	b := []byte(http2.ClientPreface)
	b = append(b, 0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0) // the client's SETTINGS, empty
	for _, f := range p.frames {
		n := uint32(len(f.payload))
		if f.oversized {
			n = 1<<24 - 1
		}
		b = append(b, byte(n>>16), byte(n>>8), byte(n), f.typ, f.flags)
		b = binary.BigEndian.AppendUint32(b, f.stream)
		b = append(b, f.payload...)
		if f.oversized {
			return b
		}
	}
	b = append(b, 0, 0, 8, byte(http2.FramePing), 0, 0, 0, 0, 0)
	return append(b, h2fzProbe[:]...)
}

// h2fzStream is what the client got on one stream.
type h2fzStream struct {
	status int    // the final response's, 0 before it
	body   []byte // DATA
	ended  bool   // END_STREAM or RST_STREAM from the server
}

// h2fzResult is what the client read on one connection, and the first
// thing wrong with it.
type h2fzResult struct {
	mu        sync.Mutex
	streams   map[uint32]*h2fzStream
	probed    bool   // the probe's ACK came
	goaway    bool   // a GOAWAY came
	goawayErr bool   // one with an error code: the server is closing
	lastID    uint32 // the lowest GOAWAY last stream id
	readErr   error  // why reading ended
	lastRead  time.Time
	bad       string // the first property broken
}

func (r *h2fzResult) fail(format string, args ...any) {
	if r.bad == "" {
		r.bad = fmt.Sprintf(format, args...)
	}
}

// h2fzRun writes plan to addr and reads until the server has read it all
// and every stream the client opened has ended (or h2fzIdle passed with
// nothing read, unless plan.answered), or the server sent GOAWAY with an
// error, or closed. It
// fails t when the server neither answers nor closes within h2fzHang, and
// returns what was read once the connection and its reader are closed.
func h2fzRun(t *testing.T, addr string, plan *h2fzPlan) *h2fzResult {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, guard)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(guard))
	r := &h2fzResult{streams: map[uint32]*h2fzStream{}, lastID: math.MaxUint32, lastRead: time.Now()}
	hang := time.NewTimer(h2fzHang)
	defer hang.Stop()
	notify, readDone, writeDone := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readDone)
		h2fzRead(conn, plan, r, notify)
	}()
	// Written whole while the reader reads. A server that stops reading
	// after its GOAWAY can block the write: closing the connection ends it.
	go func() {
		defer close(writeDone)
		conn.Write(plan.bytes())
	}()
	defer func() {
		conn.Close()
		<-readDone
		<-writeDone
	}()
	idle := time.NewTimer(h2fzIdle)
	defer idle.Stop()
	for {
		r.mu.Lock()
		done := r.readErr != nil || r.goawayErr || r.probed && (!plan.answered && time.Since(r.lastRead) >= h2fzIdle || r.allEnded(plan))
		r.mu.Unlock()
		if done {
			return r
		}
		idle.Reset(h2fzIdle)
		select {
		case <-notify:
		case <-idle.C:
		case <-hang.C:
			t.Fatalf("the server neither read everything nor closed within %v", h2fzHang)
		}
	}
}

// allEnded reports whether every stream the client opened has ended, or
// is one the server's GOAWAY says it never took; r.mu is held.
func (r *h2fzResult) allEnded(plan *h2fzPlan) bool {
	for id := range plan.opened {
		if s := r.streams[id]; (s == nil || !s.ended) && !(r.goaway && id > r.lastID) && !plan.clientReset(id) {
			return false
		}
	}
	return true
}

// clientReset reports whether the client reset stream id itself.
func (p *h2fzPlan) clientReset(id uint32) bool {
	for _, f := range p.frames {
		if f.typ == uint8(http2.FrameRSTStream) && f.stream&math.MaxInt32 == id {
			return true
		}
	}
	return false
}

// h2fzRead reads the server's frames into r until the connection ends,
// checking each as it comes.
func h2fzRead(conn net.Conn, plan *h2fzPlan, r *h2fzResult, notify chan<- struct{}) {
	fr := http2.NewFramer(io.Discard, conn)
	fr.SetMaxReadFrameSize(1<<24 - 1) // whatever the client's SETTINGS allowed
	dec := hpack.NewDecoder(4096, nil)
	dec.SetAllowedMaxDynamicTableSize(math.MaxUint32) // likewise
	fr.ReadMetaHeaders = dec
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		r.mu.Lock()
		r.lastRead = time.Now()
		if err != nil {
			if !closedErr(err) {
				r.fail("the server wrote a frame the client cannot read: %v", err)
			}
			r.readErr = err
		} else {
			r.frame(f, plan)
		}
		r.mu.Unlock()
		select {
		case notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// frame records f and checks it; r.mu is held.
func (r *h2fzResult) frame(f http2.Frame, plan *h2fzPlan) {
	id := f.Header().StreamID
	stream := func() *h2fzStream {
		if !plan.opened[id] {
			r.fail("%v on stream %d, which the client never opened", f.Header().Type, id)
		}
		if r.goaway && id > r.lastID {
			r.fail("%v on stream %d after a GOAWAY whose last stream is %d", f.Header().Type, id, r.lastID)
		}
		s := r.streams[id]
		if s == nil {
			s = &h2fzStream{}
			r.streams[id] = s
		}
		if s.ended {
			r.fail("%v on stream %d after it ended", f.Header().Type, id)
		}
		return s
	}
	switch f := f.(type) {
	case *http2.PingFrame:
		if f.IsAck() && f.Data == h2fzProbe {
			r.probed = true
		}
	case *http2.GoAwayFrame:
		// net/http names the stream of the frame that was a connection
		// error, even one the client never opened (DATA on an idle
		// stream, HEADERS on an even one): a last stream too high only
		// keeps a client from retrying, so the bound is any the client
		// named. One too low is what would do harm: a stream it answered.
		switch {
		case f.LastStreamID > plan.maxStream:
			r.fail("GOAWAY's last stream %d is past any the client named (%d)", f.LastStreamID, plan.maxStream)
		case f.LastStreamID > r.lastID:
			r.fail("GOAWAY's last stream %d after one of %d", f.LastStreamID, r.lastID)
		}
		for sid, s := range r.streams {
			if sid > f.LastStreamID && s.status != 0 {
				r.fail("GOAWAY's last stream is %d, but stream %d was answered", f.LastStreamID, sid)
			}
		}
		r.goaway, r.lastID = true, min(r.lastID, f.LastStreamID)
		r.goawayErr = r.goawayErr || f.ErrCode != http2.ErrCodeNo
	case *http2.MetaHeadersFrame:
		s := stream()
		if s.status == 0 {
			fmt.Sscan(f.PseudoValue("status"), &s.status)
			if s.status < 200 { // interim
				s.status = 0
			}
		}
		s.ended = f.StreamEnded()
		r.answer(id, s, plan)
	case *http2.DataFrame:
		s := stream()
		if s.status == 0 {
			r.fail("DATA on stream %d before its response", id)
		}
		s.body = append(s.body, f.Data()...)
		s.ended = f.StreamEnded()
		r.answer(id, s, plan)
	case *http2.RSTStreamFrame:
		if id == 0 {
			r.fail("RST_STREAM on stream 0")
		}
		if s := r.streams[id]; s != nil {
			s.ended = true
		} else {
			r.streams[id] = &h2fzStream{ended: true}
		}
	case *http2.PushPromiseFrame:
		r.fail("PUSH_PROMISE on stream %d", id)
	}
}

// answer checks a stream's body so far: a backend's answer names the path
// the client asked for on this stream, and no other.
func (r *h2fzResult) answer(id uint32, s *h2fzStream, plan *h2fzPlan) {
	want := ""
	if plan.paths[id] {
		want = h2fzPath(h2fzNonce, id)
	}
	if !strings.Contains(string(s.body), h2fzNonce) {
		return
	}
	if want == "" || !strings.HasPrefix(want, string(s.body)) || s.ended && string(s.body) != want {
		r.fail("stream %d answered %q; the client asked for %q on it", id, s.body, want)
	}
}

// h2fzNonce tells this process's paths from an input's (h2fzPath).
var h2fzNonce = func() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// h2fzServing are the frames of the stacks that serve one HTTP/2
// connection.
var h2fzServing = []string{"internal/h2.(*conn)", "internal/h2.(*stream)", "internal/h2.(*Server).ServeConn",
	"internal/h2guard.(*Conn)", "internal/server.(*listener).sort("}

// h2fzLinger is how long a goroutine serving a closed connection may stay
// in a bounded wait (h2fzWaiting): the server's linger after a GOAWAY for
// an error, and the guard's grace and linger, are 1 s each.
const h2fzLinger = 3 * time.Second

// h2fzWaiting reports whether the stack g waits for a timer that ends it:
// the server's linger after a GOAWAY for an error (it reads and drops
// what the client still sends, for a second), the handlers of that
// connection, whose contexts are cancelled as it begins and which end
// with their backend exchanges, or the guard's enforcement (its grace, or
// its linger).
func h2fzWaiting(g string) bool {
	return strings.Contains(g, "internal/h2.(*conn).lingerClose(") || strings.Contains(g, "internal/h2.(*stream).run(") ||
		strings.Contains(g, "internal/h2guard.(*Conn).enforce(")
}

// h2fzGoroutines follows the goroutines serving HTTP/2 connections across
// inputs: after each input every one must end, but for those in a bounded
// wait, which must end within h2fzLinger of when they were first seen.
type h2fzGoroutines struct {
	seen map[string]time.Time // by goroutine id
}

// settle fails t unless, within leaktest.Wait, every goroutine serving a
// connection has ended or waits for its timer, and none has waited for
// longer than h2fzLinger.
func (gs *h2fzGoroutines) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(leaktest.Wait)
	for {
		var busy, stale []string
		now, seen := time.Now(), map[string]time.Time{}
		for _, g := range h2fzServingLeft() {
			if !h2fzWaiting(g) {
				busy = append(busy, g)
				continue
			}
			id, _, _ := strings.Cut(g, " [")
			first, ok := gs.seen[id]
			if !ok {
				first = now
			}
			seen[id] = first
			if now.Sub(first) > h2fzLinger {
				stale = append(stale, g)
			}
		}
		gs.seen = seen
		if len(stale) > 0 {
			t.Fatalf("%d goroutines serving closed HTTP/2 connections still wait after %v:\n\n%s",
				len(stale), h2fzLinger, strings.Join(stale, "\n\n"))
		}
		if len(busy) == 0 {
			return
		}

		if now.After(deadline) {
			t.Fatalf("%d goroutines still serve closed HTTP/2 connections after %v:\n\n%s",
				len(busy), leaktest.Wait, strings.Join(busy, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

// h2fzServingLeft returns the stacks of the goroutines serving HTTP/2
// connections.
func h2fzServingLeft() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, m := range h2fzServing {
			if strings.Contains(g, m) {
				left = append(left, g)
				break
			}
		}
	}
	return left
}

// FuzzH2Frames writes a fuzzed sequence of frames (h2fzDecode) after the
// client preface and SETTINGS to levee's h2c listener, then a PING, and
// reads until the server has read and answered it all, or closed. It
// checks that the server does so within h2fzHang; that its frames are
// ones a client can read; that it answers (HEADERS, DATA) only on streams
// the client opened, never after ending one, and with the backend's answer
// for the path the client asked for on that stream, no other; that a
// GOAWAY's last stream is 0 or a client's, no higher than any the client
// opened or than an earlier GOAWAY's, and below every stream it answered;
// that no handler panicked; and, after each input, that a fresh connection
// is served and that every goroutine serving the connections ends.
func FuzzH2Frames(f *testing.F) {
	for _, s := range h2fzSeeds() {
		f.Add(s)
	}
	leaktest.Check(f) // its cleanup runs last, after the proxy's and the backend's
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RequestURI)
	}))
	f.Cleanup(backend.Close)
	p := startProxy(f, fmt.Sprintf("listen: [{addr: 127.0.0.1:0, h2c: true}]\napps:\n  frames:\n    hosts: [%s]\n    backends: [%s]\n",
		h2fzHost, backend.Listener.Addr()))
	addr := p.srv.Addrs()[0].String()
	fresh := h2fzExpand(h2fzDecode(h2fzEncode(h2fzOp{typ: uint8(http2.FrameHeaders),
		flags: uint8(http2.FlagHeadersEndHeaders | http2.FlagHeadersEndStream), sel: h2fzSelNew | h2fzRequest})), h2fzNonce)
	fresh.answered = true
	gs := &h2fzGoroutines{}
	f.Fuzz(func(t *testing.T, in []byte) {
		plan := h2fzExpand(h2fzDecode(in), h2fzNonce)
		if r := h2fzRun(t, addr, plan); r.bad != "" {
			t.Fatalf("%s (read ended: %v)", r.bad, r.readErr)
		}
		r := h2fzRun(t, addr, fresh)
		if s := r.streams[1]; r.bad != "" || s == nil || s.status != http.StatusOK || string(s.body) != h2fzPath(h2fzNonce, 1) {
			t.Fatalf("a fresh connection afterwards: %s; stream 1 %+v (read ended: %v)", r.bad, s, r.readErr)
		}
		gs.settle(t)
		if logs := p.logs.String(); strings.Contains(logs, "panic") {
			t.Fatalf("levee logged a panic:\n%s", logs)
		}
	})
}
