package h2guard

import (
	"encoding/binary"
	"io"
)

// Frame types and flags (RFC 9113 §6) that the guard reads.
const (
	typeData         = 0x0
	typeHeaders      = 0x1
	typePriority     = 0x2
	typeRSTStream    = 0x3
	typeSettings     = 0x4
	typePushPromise  = 0x5
	typePing         = 0x6
	typeGoAway       = 0x7
	typeWindowUpdate = 0x8
	typeContinuation = 0x9

	flagEndStream  = 0x1 // DATA, HEADERS
	flagAck        = 0x1 // SETTINGS, PING
	flagEndHeaders = 0x4 // HEADERS, CONTINUATION
	flagPadded     = 0x8 // DATA, HEADERS
)

// headerLen is a frame header's size; prefaceLen the client preface's
// (RFC 9113 §3.4), which comes before the first frame.
const (
	headerLen  = 9
	prefaceLen = 24
)

// Frame is what the guard reads of one frame: its header and, for the
// frames whose count depends on it, the start of its payload.
type Frame struct {
	Type, Flags uint8
	Stream      uint32
	Length      uint32 // payload bytes
	// Prefix holds the first prefixLen payload bytes: the pad length of a
	// padded DATA frame, a WINDOW_UPDATE's increment, a RST_STREAM's error
	// code.
	Prefix [4]byte
}

// prefixLen is how many payload bytes of f the guard needs.
func (f *Frame) prefixLen() int {
	var n uint32
	switch {
	case f.Type == typeWindowUpdate, f.Type == typeRSTStream:
		n = 4
	case f.Type == typeData && f.Flags&flagPadded != 0:
		n = 1
	}
	return int(min(n, f.Length))
}

// increment is a WINDOW_UPDATE's window size increment (0 if it is short).
func (f *Frame) increment() uint32 {
	if f.Length < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(f.Prefix[:]) & 0x7fffffff
}

// errCode is a RST_STREAM's error code (0, NO_ERROR, if it is short).
func (f *Frame) errCode() uint32 {
	if f.Length < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(f.Prefix[:])
}

// emptyData reports whether f is a DATA frame that carries no data (none,
// or padding only) and does not end its stream.
func (f *Frame) emptyData() bool {
	if f.Type != typeData || f.Flags&flagEndStream != 0 {
		return false
	}
	if f.Flags&flagPadded != 0 {
		return f.Length == 0 || uint32(f.Prefix[0])+1 >= f.Length
	}
	return f.Length == 0
}

// scanner finds the frames in a byte stream that arrives cut at arbitrary
// points. The zero value expects a frame header first; set skip to pass a
// preface. It keeps no bytes beyond one frame header and prefix.
type scanner struct {
	skip     uint32 // payload bytes to pass before the next frame header
	hdr      [headerLen]byte
	nhdr     int   // header bytes collected
	cur      Frame // the frame whose payload is passing
	want     int   // prefix bytes of cur to collect (0 without prefixes)
	npre     int   // prefix bytes collected
	prefixes bool  // collect prefixes at all
}

// next consumes p up to the end of the next frame header (and the prefix
// the guard needs) and returns that frame, or consumes all of p and
// reports none.
func (s *scanner) next(p []byte) (n int, f Frame, ok bool) {
	for n < len(p) {
		switch {
		case s.npre < s.want:
			m := copy(s.cur.Prefix[s.npre:s.want], p[n:])
			s.npre += m
			s.skip -= uint32(m)
			n += m
			if s.npre == s.want {
				return n, s.cur, true
			}
		case s.skip > 0:
			m := uint32(len(p) - n)
			if m > s.skip {
				m = s.skip
			}
			s.skip -= m
			n += int(m)
		default:
			m := copy(s.hdr[s.nhdr:], p[n:])
			s.nhdr += m
			n += m
			if s.nhdr < headerLen {
				return n, Frame{}, false
			}
			s.nhdr = 0
			s.cur = parseHeader(&s.hdr)
			s.skip, s.npre, s.want = s.cur.Length, 0, 0
			if s.prefixes {
				s.want = s.cur.prefixLen()
			}
			if s.want == 0 {
				return n, s.cur, true
			}
		}
	}
	return n, Frame{}, false
}

// boundary reports whether the bytes consumed so far end with a whole frame
// (or the preface).
func (s *scanner) boundary() bool { return s.nhdr == 0 && s.skip == 0 && s.npre == s.want }

// toBoundary returns how many bytes of p would end the frame in progress
// (0 at a boundary), and whether p holds all of them. It consumes nothing.
func (s *scanner) toBoundary(p []byte) (int, bool) {
	if s.nhdr == 0 {
		return int(min(s.skip, uint32(len(p)))), s.skip <= uint32(len(p))
	}
	need := headerLen - s.nhdr
	if len(p) < need {
		return len(p), false
	}
	var h [headerLen]byte
	copy(h[copy(h[:], s.hdr[:s.nhdr]):], p[:need])
	end := uint64(need) + uint64(parseHeader(&h).Length)
	if end > uint64(len(p)) {
		return len(p), false
	}
	return int(end), true
}

func parseHeader(h *[headerLen]byte) Frame {
	return Frame{
		Length: uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]),
		Type:   h[3],
		Flags:  h[4],
		Stream: binary.BigEndian.Uint32(h[5:]) & 0x7fffffff,
	}
}

// ErrCodeInadequateSecurity is the GOAWAY code for a TLS connection that
// does not meet HTTP/2's requirements (RFC 9113 §9.2).
const ErrCodeInadequateSecurity = 0xc

// Refuse writes a server's first frames that end an HTTP/2 connection
// before it starts: an empty SETTINGS and a GOAWAY with code.
func Refuse(w io.Writer, code uint32) error {
	var b [2*headerLen + 8]byte
	_, err := w.Write(appendGoAway(b[:0], true, 0, code))
	return err
}

// appendGoAway appends an empty SETTINGS frame when first (a server's
// preface must be SETTINGS, RFC 9113 §3.4) and a GOAWAY frame.
func appendGoAway(b []byte, first bool, lastStream uint32, code uint32) []byte {
	if first {
		b = append(b, 0, 0, 0, typeSettings, 0, 0, 0, 0, 0)
	}
	b = append(b, 0, 0, 8, typeGoAway, 0, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, lastStream&0x7fffffff)
	return binary.BigEndian.AppendUint32(b, code)
}
