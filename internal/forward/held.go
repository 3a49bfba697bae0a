package forward

import (
	"net/http"
	"strconv"
	"time"

	"github.com/leveeproxy/levee/internal/membuf"
	"github.com/leveeproxy/levee/internal/reply"
)

// HeldResponse is the net/http engine's response buffer: a response of
// known length up to the pool's response_buffer is held whole until Send,
// so the caller can give back the slot before a slow client reads a byte
// of it. Other responses (longer, without a length, 1xx) pass straight
// through. Unwrap keeps http.ResponseController's methods reachable.
type HeldResponse struct {
	w       http.ResponseWriter
	p       *Pool
	holding bool
	code    int
	buf     membuf.Buffer
}

// Reset makes h pass everything through to w; Hold arms it for p's responses.
func (h *HeldResponse) Reset(w http.ResponseWriter) { *h = HeldResponse{w: w} }

// Hold lets h hold the next response within p's response_buffer.
func (h *HeldResponse) Hold(p *Pool) {
	if p.respBuffer > 0 {
		h.p = p
	}
}

func (h *HeldResponse) Header() http.Header         { return h.w.Header() }
func (h *HeldResponse) Unwrap() http.ResponseWriter { return h.w }

func (h *HeldResponse) WriteHeader(code int) {
	if h.p != nil && !h.holding && code >= 200 {
		if n, err := strconv.ParseInt(h.w.Header().Get("Content-Length"), 10, 64); err == nil && n >= 0 && n <= h.p.respBuffer {
			h.buf.Init(h.p.buffers)
			if h.buf.Reserve(int(n)) {
				h.holding, h.code = true, code
				return
			}
			h.buf.Free()
		}
		h.p = nil // one response only
	}
	h.w.WriteHeader(code)
}

func (h *HeldResponse) Write(b []byte) (int, error) {
	if h.holding && !h.buf.Append(b) {
		// More than the length said: pass on what is held, then the rest.
		h.Send()
	}
	if h.holding {
		return len(b), nil
	}
	return h.w.Write(b)
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
	b := h.buf.Bytes()
	rc := http.NewResponseController(h.w)
	start := time.Now()
	var limit time.Time
	if h.p.writeTimeout > 0 {
		limit = start.Add(h.p.writeTimeout)
	}
	var sent int
	for sent < len(b) {
		end := min(len(b), sent+unpacedBytes)
		paced := h.p.minRate.Rate > 0 && end > unpacedBytes
		if paced {
			rc.SetWriteDeadline(h.p.minRate.WriteDeadline(start, time.Now(), int64(end-sent), limit))
		}
		n, err := h.w.Write(b[sent:end])
		sent += n
		if err != nil {
			if paced && isTimeout(err) && (limit.IsZero() || time.Now().Before(limit)) {
				h.p.onReject(reply.MinRate)
				h.p.logTooSlow("response", int64(sent), "", nil)
			}
			break
		}
	}
	h.buf.Free()
	h.p = nil
}

// Holding reports whether h holds a response none of which has reached
// the client.
func (h *HeldResponse) Holding() bool { return h.holding }

// Free drops what h holds (a response aborted before Send).
func (h *HeldResponse) Free() {
	h.holding = false
	h.buf.Free()
}

var _ interface{ Unwrap() http.ResponseWriter } = (*HeldResponse)(nil)
