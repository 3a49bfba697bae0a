package forward

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/spill"
)

// HeldResponse is the net/http engine's response buffer: a response of
// known length up to the pool's response_buffer is held whole until Send,
// so the caller can give back the slot before a slow client reads a byte
// of it; a longer one up to response_spill is held too, its first
// response_buffer bytes in memory and the rest in a spill file. Other
// responses (longer, without a length, 1xx, a HEAD's, or any the budgets
// refuse) pass straight through. Unwrap keeps http.ResponseController's
// methods reachable.
type HeldResponse struct {
	w       http.ResponseWriter
	p       *Pool
	noSpill bool // a HEAD: nothing follows the header
	holding bool
	code    int
	buf     membuf.Buffer
	bufMax  int         // the bytes buf holds; the rest go to file
	file    *spill.File // nil: none
}

// Reset makes h pass everything through to w; Hold arms it for p's responses.
func (h *HeldResponse) Reset(w http.ResponseWriter) { *h = HeldResponse{w: w} }

// Hold lets h hold the next response to r within p's response_buffer or
// response_spill.
func (h *HeldResponse) Hold(p *Pool, r *http.Request) {
	if p.respBuffer > 0 || p.spill != nil {
		h.p = p
		h.noSpill = r.Method == http.MethodHead
	}
}

func (h *HeldResponse) Header() http.Header         { return h.w.Header() }
func (h *HeldResponse) Unwrap() http.ResponseWriter { return h.w }

func (h *HeldResponse) WriteHeader(code int) {
	if h.p != nil && !h.holding && code >= 200 {
		if n, err := strconv.ParseInt(h.w.Header().Get("Content-Length"), 10, 64); err == nil && n >= 0 && h.arm(n, code) {
			h.holding, h.code = true, code
			return
		}
		h.p = nil // one response only
	}
	h.w.WriteHeader(code)
}

// arm makes room for a response of n bytes with status code, in memory
// and perhaps on disk, and reports whether it may be held.
func (h *HeldResponse) arm(n int64, code int) bool {
	p := h.p
	if n <= p.respBuffer {
		h.buf.Init(p.buffers)
		if h.buf.Reserve(int(n)) {
			h.bufMax = int(n)
			return true
		}
		h.buf.Free()
		return false
	}
	if p.spill == nil || h.noSpill || code == http.StatusNoContent || code == http.StatusNotModified {
		return false
	}
	head := 0
	if p.respBuffer > 0 && p.buffers != nil {
		h.buf.Init(p.buffers)
		if h.buf.Reserve(int(p.respBuffer)) {
			head = int(p.respBuffer)
		} else {
			h.buf.Free() // all of it on disk
		}
	}
	f, err := p.spill.Open(n-int64(head), n, p.respSpill)
	if err != nil {
		h.buf.Free()
		return false // streams, holding the slot; counted
	}
	h.bufMax, h.file = head, f
	return true
}

func (h *HeldResponse) Write(b []byte) (int, error) {
	if !h.holding {
		return h.w.Write(b)
	}
	n := h.hold(b)
	if n == len(b) {
		return n, nil
	}
	// More than the length said, or the disk failed: pass on what is held,
	// then the rest, as a streamed response.
	if h.file != nil && h.file.Len() < h.file.Size() {
		h.p.spill.Refuse(spill.ReasonError)
	}
	h.Send()
	m, err := h.w.Write(b[n:])
	return n + m, err
}

// hold keeps what of b fits: in memory up to bufMax, then on disk.
func (h *HeldResponse) hold(b []byte) int {
	n := min(len(b), h.bufMax-h.buf.Len())
	h.buf.Append(b[:n])
	if h.file == nil || n == len(b) {
		return n
	}
	m, _ := h.file.Write(b[n:])
	return n + m
}

// Flush is held back with the response.
func (h *HeldResponse) Flush() {
	if !h.holding {
		http.NewResponseController(h.w).Flush()
	}
}

// Send writes what h holds, if anything, to the client, each piece past the
// first unpacedBytes with a write deadline at server.min_rate; a client
// slower than that is cut off, counted and logged.
func (h *HeldResponse) Send() {
	if !h.holding {
		return
	}
	h.holding = false
	h.w.WriteHeader(h.code)
	s := sender{h: h, rc: http.NewResponseController(h.w), start: time.Now()}
	if h.p.writeTimeout > 0 {
		s.limit = s.start.Add(h.p.writeTimeout)
	}
	if s.send(h.buf.Bytes()) && h.file != nil {
		chunk := bufferPool{}.Get()
		for {
			n, err := h.file.Read(chunk)
			if n > 0 && !s.send(chunk[:n]) || err != nil {
				break // io.EOF: all sent
			}
		}
		bufferPool{}.Put(chunk)
	}
	h.free()
	h.p = nil
}

// sender writes a held response to the client at server.min_rate at least.
type sender struct {
	h            *HeldResponse
	rc           *http.ResponseController
	start, limit time.Time
	sent         int
}

// send writes b, a piece at a time, and reports whether all of it went.
func (s *sender) send(b []byte) bool {
	p := s.h.p
	for len(b) > 0 {
		piece := b[:min(len(b), unpacedBytes)]
		paced := p.minRate.Rate > 0 && s.sent+len(piece) > unpacedBytes
		if paced {
			s.rc.SetWriteDeadline(p.minRate.WriteDeadline(s.start, time.Now(), int64(len(piece)), s.limit))
		}
		n, err := s.h.w.Write(piece)
		s.sent += n
		b = b[n:]
		if err != nil {
			if paced && isTimeout(err) && (s.limit.IsZero() || time.Now().Before(s.limit)) {
				p.onReject(reply.MinRate)
				p.logTooSlow("response", int64(s.sent), "", nil)
			}
			return false
		}
	}
	return true
}

// Free drops what h holds (a response aborted before Send).
func (h *HeldResponse) Free() {
	h.holding = false
	h.free()
}

func (h *HeldResponse) free() {
	h.buf.Free()
	if h.file != nil {
		h.file.Close()
		h.file = nil
	}
}

var (
	_ interface{ Unwrap() http.ResponseWriter } = (*HeldResponse)(nil)
	_ io.Writer                                 = (*HeldResponse)(nil)
)
