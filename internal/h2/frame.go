package h2

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Frame types (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// Settings (RFC 9113 §6.5.2).
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

// ErrCode is an HTTP/2 error code (RFC 9113 §7).
type ErrCode uint32

const (
	ErrCodeNo                 ErrCode = 0x0
	ErrCodeProtocol           ErrCode = 0x1
	ErrCodeInternal           ErrCode = 0x2
	ErrCodeFlowControl        ErrCode = 0x3
	ErrCodeSettingsTimeout    ErrCode = 0x4
	ErrCodeStreamClosed       ErrCode = 0x5
	ErrCodeFrameSize          ErrCode = 0x6
	ErrCodeRefusedStream      ErrCode = 0x7
	ErrCodeCancel             ErrCode = 0x8
	ErrCodeCompression        ErrCode = 0x9
	ErrCodeConnect            ErrCode = 0xa
	ErrCodeEnhanceYourCalm    ErrCode = 0xb
	ErrCodeInadequateSecurity ErrCode = 0xc
	ErrCodeHTTP11Required     ErrCode = 0xd
)

var errCodeNames = [...]string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
	"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
	"COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}

func (e ErrCode) String() string {
	if int(e) < len(errCodeNames) {
		return errCodeNames[e]
	}
	return fmt.Sprintf("unknown error code 0x%x", uint32(e))
}

const (
	frameHeaderLen = 9
	// clientPreface is what an HTTP/2 client sends first (RFC 9113 §3.4).
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// maxFrameSize is the largest frame payload the server reads: the
	// protocol's default, which it does not raise (a peer must not send
	// larger frames, and a proxy gains nothing from them).
	maxFrameSize = 16384
	// maxWindow is the largest flow control window (§6.9.1).
	maxWindow = 1<<31 - 1
	// defaultWindow is a window's initial size until SETTINGS change it.
	defaultWindow = 65535
)

// connError is a connection error (§5.4.1): GOAWAY with code, then close.
type connError struct {
	code   ErrCode
	reason string
}

func (e connError) Error() string {
	return "h2: connection error " + e.code.String() + ": " + e.reason
}

// streamError is a stream error (§5.4.2): RST_STREAM with code.
type streamError struct {
	id   uint32
	code ErrCode
}

func (e streamError) Error() string {
	return fmt.Sprintf("h2: stream %d error %v", e.id, e.code)
}

// frameHeader is a frame's fixed header.
type frameHeader struct {
	length uint32
	typ    uint8
	flags  uint8
	stream uint32
}

func parseFrameHeader(b []byte) frameHeader {
	return frameHeader{
		length: uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		typ:    b[3],
		flags:  b[4],
		stream: binary.BigEndian.Uint32(b[5:]) & 0x7fffffff,
	}
}

func appendFrameHeader(b []byte, length int, typ, flags uint8, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendRSTStream(b []byte, stream uint32, code ErrCode) []byte {
	b = appendFrameHeader(b, 4, frameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendWindowUpdate(b []byte, stream uint32, incr uint32) []byte {
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, incr)
}

func appendGoAway(b []byte, last uint32, code ErrCode) []byte {
	b = appendFrameHeader(b, 8, frameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

// appendHeaderBlock appends block as a HEADERS frame and as many
// CONTINUATION frames as the peer's frame size needs.
func appendHeaderBlock(b []byte, stream uint32, block []byte, endStream bool, maxFrame int) []byte {
	flags := uint8(0)
	if endStream {
		flags |= flagEndStream
	}
	typ := uint8(frameHeaders)
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= flagEndHeaders
		}
		b = appendFrameHeader(b, n, typ, f, stream)
		b = append(b, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		typ, flags = frameContinuation, 0
	}
}

// readPayload returns a frame's payload of n bytes: in br's buffer when
// it fits (the caller discards it once handled), else read into
// *scratch, made on first use.
func readPayload(br *bufio.Reader, n int, scratch *[]byte) ([]byte, error) {
	if n <= br.Size() {
		return br.Peek(n)
	}
	if *scratch == nil {
		*scratch = make([]byte, maxFrameSize)
	}
	p := (*scratch)[:n]
	_, err := io.ReadFull(br, p)
	return p, err
}

// frameFault is a rule of RFC 9113 §6 that a frame breaks.
type frameFault struct {
	code   ErrCode
	reason string
	stream bool // the RFC makes it a stream error, not a connection error
}

// checkFrame applies the rules of §6 that need no state of either end:
// on which stream each type may come, its length, and a PRIORITY that
// names its own stream (§5.3.1). p is the payload. Both ends check
// every frame with it and differ only in how they react. PUSH_PROMISE is
// refused here too: levee's server is never sent one by a well-behaved
// client, and its client never enables push.
func checkFrame(fh frameHeader, p []byte) (frameFault, bool) {
	onStream0 := fh.stream == 0
	switch fh.typ {
	case frameData:
		if onStream0 {
			return frameFault{ErrCodeProtocol, "DATA on stream 0", false}, false
		}
	case frameHeaders:
		if onStream0 {
			return frameFault{ErrCodeProtocol, "HEADERS on stream 0", false}, false
		}
	case framePriority:
		if onStream0 {
			return frameFault{ErrCodeProtocol, "PRIORITY on stream 0", false}, false
		}
		if fh.length != 5 {
			return frameFault{ErrCodeFrameSize, "PRIORITY length", true}, false
		}
		if binary.BigEndian.Uint32(p)&0x7fffffff == fh.stream {
			return frameFault{ErrCodeProtocol, "PRIORITY on itself", true}, false
		}
	case frameRSTStream:
		if fh.length != 4 {
			return frameFault{ErrCodeFrameSize, "RST_STREAM length", false}, false
		}
		if onStream0 {
			return frameFault{ErrCodeProtocol, "RST_STREAM on stream 0", false}, false
		}
	case frameSettings:
		switch {
		case !onStream0:
			return frameFault{ErrCodeProtocol, "SETTINGS on a stream", false}, false
		case fh.flags&flagAck != 0 && fh.length != 0:
			return frameFault{ErrCodeFrameSize, "SETTINGS ACK with a payload", false}, false
		case fh.length%6 != 0:
			return frameFault{ErrCodeFrameSize, "SETTINGS length", false}, false
		}
	case framePushPromise:
		return frameFault{ErrCodeProtocol, "PUSH_PROMISE, which levee never enables", false}, false
	case framePing:
		if !onStream0 {
			return frameFault{ErrCodeProtocol, "PING on a stream", false}, false
		}
		if fh.length != 8 {
			return frameFault{ErrCodeFrameSize, "PING length", false}, false
		}
	case frameGoAway:
		if !onStream0 {
			return frameFault{ErrCodeProtocol, "GOAWAY on a stream", false}, false
		}
		if fh.length < 8 {
			return frameFault{ErrCodeFrameSize, "GOAWAY length", false}, false
		}
	case frameWindowUpdate:
		if fh.length != 4 {
			return frameFault{ErrCodeFrameSize, "WINDOW_UPDATE length", false}, false
		}
	case frameContinuation:
		if onStream0 {
			return frameFault{ErrCodeProtocol, "CONTINUATION on stream 0", false}, false
		}
	}
	return frameFault{}, true
}

// dataPayload is a DATA frame's data, its padding (§6.1) stripped; ok is
// false for padding as long as the frame, a PROTOCOL_ERROR.
func dataPayload(fh frameHeader, p []byte) (data []byte, ok bool) {
	if fh.flags&flagPadded == 0 {
		return p, true
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, false
	}
	return p[1 : len(p)-int(p[0])], true
}

// headersPayload is a HEADERS frame's block fragment (§6.2): the pad
// length, the priority fields and the padding stripped. selfDep reports
// a priority naming the stream itself.
func headersPayload(fh frameHeader, p []byte) (block []byte, selfDep bool, f frameFault, ok bool) {
	pad := 0
	if fh.flags&flagPadded != 0 {
		if len(p) == 0 {
			return nil, false, frameFault{ErrCodeProtocol, "HEADERS padding", false}, false
		}
		pad, p = int(p[0]), p[1:]
	}
	if fh.flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, false, frameFault{ErrCodeFrameSize, "HEADERS priority", false}, false
		}
		selfDep = binary.BigEndian.Uint32(p)&0x7fffffff == fh.stream
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false, frameFault{ErrCodeProtocol, "HEADERS padding", false}, false
	}
	return p[:len(p)-pad], selfDep, frameFault{}, true
}

// checkSetting applies §6.5.2's rules to one setting a peer sent;
// fromServer is true on levee's client, where a server's ENABLE_PUSH may
// only be 0.
func checkSetting(id uint16, v uint32, fromServer bool) (frameFault, bool) {
	switch id {
	case settingEnablePush:
		if v > 1 || fromServer && v != 0 {
			return frameFault{ErrCodeProtocol, "SETTINGS_ENABLE_PUSH", false}, false
		}
	case settingInitialWindowSize:
		if v > maxWindow {
			return frameFault{ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE", false}, false
		}
	case settingMaxFrameSize:
		if v < maxFrameSize || v > 1<<24-1 {
			return frameFault{ErrCodeProtocol, "SETTINGS_MAX_FRAME_SIZE", false}, false
		}
	}
	return frameFault{}, true
}
