package server

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// h2fzSeeds are FuzzH2Frames' seed corpus: each form of frame the issue
// names, the floods of h2flood_test.go and h2reset_test.go in miniature
// (a loop writes a frame 64 times; most reach the guard's bound), and a
// few ordinary exchanges for the fuzzer to start from.
func h2fzSeeds() [][]byte {
	const (
		data, headers, priority = uint8(http2.FrameData), uint8(http2.FrameHeaders), uint8(http2.FramePriority)
		rst, settings, push     = uint8(http2.FrameRSTStream), uint8(http2.FrameSettings), uint8(http2.FramePushPromise)
		ping, goaway, window    = uint8(http2.FramePing), uint8(http2.FrameGoAway), uint8(http2.FrameWindowUpdate)
		cont                    = uint8(http2.FrameContinuation)
		es, eh, padded, prio    = 0x1, 0x4, 0x8, 0x20 // END_STREAM, END_HEADERS, PADDED, PRIORITY
		ack                     = 0x1
		one, three, five        = 1, 2, 3 // stream selectors
		zero, nw, last          = h2fzSelZero, h2fzSelNew, h2fzSelLast
		even, top               = h2fzSelEven, h2fzSelMax
		req, loop               = h2fzRequest, h2fzLoop
		cancel                  = 0x8 // RST_STREAM CANCEL
	)
	u32 := func(vs ...uint32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	setting := func(id http2.SettingID, v uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte{byte(id >> 8), byte(id)}, v)
	}
	op := func(typ, flags, sel uint8, payload ...byte) h2fzOp {
		return h2fzOp{typ: typ, flags: flags, sel: sel, payload: payload}
	}
	get := op(headers, eh|es, nw|req) // a GET on a new stream
	// times writes o in n loops: 64n frames.
	times := func(n int, o h2fzOp) []h2fzOp {
		o.sel |= loop
		out := make([]h2fzOp, n)
		for i := range out {
			out[i] = o
		}
		return out
	}
	// once marks the end of ops: a loop after them repeats none of them.
	once := func(ops ...h2fzOp) []h2fzOp {
		ops[len(ops)-1].sel |= h2fzMark
		return ops
	}
	cat := func(parts ...[]h2fzOp) []h2fzOp {
		var out []h2fzOp
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	seeds := [][]h2fzOp{
		// Ordinary exchanges.
		{get},
		{op(headers, eh|es, one|req), op(headers, eh|es, three|req), op(ping, 0, zero, []byte("12345678")...),
			op(settings, ack, zero), op(headers, eh|es, five|req)},
		{op(headers, eh, nw|req), op(data, es, last, []byte("hello")...)},
		{op(headers, es, nw|req), op(cont, eh, last)},                                                                       // a block split, its CONTINUATION empty
		{op(headers, eh|es|padded, nw|req, 0)},                                                                              // padded, no padding
		{op(headers, eh, nw|req), op(data, 0, last, []byte("x")...), op(headers, eh|es, last, 0, 3, 'x', '-', 't', 1, '1')}, // trailers
		{op(get.typ, get.flags, get.sel|loop)},                                                                              // 64 requests at once: no answer on another's stream
		// The floods, in miniature.
		{op(headers, eh|es, nw|req), op(rst, 0, last|loop, u32(cancel)...)}, // rapid reset
		times(2, op(ping, 0, zero, []byte("pingpong")...)),
		times(2, op(settings, 0, zero)),
		cat(once(op(headers, eh, nw|req)), times(2, op(data, 0, last))), // empty DATA
		cat(once(get), times(17, op(window, 0, last, u32(1<<16)...))),   // updates on a closed stream
		cat(once(op(settings, 0, zero, setting(http2.SettingInitialWindowSize, 0)...), get),
			times(17, op(window, 0, last, u32(1)...))), // a window opened byte by byte
		cat(once(op(headers, 0, nw)), times(1, op(cont, 0, last))), // CONTINUATION, never ending
		times(17, op(0x20, 0, one, []byte("x")...)),                // unknown frames
		times(17, op(priority, 0, three, 0, 0, 0, 0, 16)),          // PRIORITY
		{get, op(window, 0, last|loop, u32(1<<31-1)...)},           // MadeYouReset: window overflow
		{get, op(data, es, last|loop, []byte("x")...)},             // MadeYouReset: DATA after END_STREAM
		{op(headers, eh|es|prio, one|req, append(u32(1), 15)...)},  // MadeYouReset: depending on itself
		// Frames out of place, or malformed.
		{op(cont, eh, one|req)},              // CONTINUATION without HEADERS
		{get, op(cont, eh, last)},            // CONTINUATION after a complete block
		{op(data, es, five, []byte("x")...)}, // DATA on an idle stream
		{op(window, 0, zero, u32(1<<31-1)...), op(window, 0, zero, u32(1<<31-1)...)},     // connection window overflow
		{op(window, 0, zero, u32(0)...)},                                                 // a zero increment
		{op(headers, eh, nw|req), op(window, 0, last, u32(0)...)},                        // a zero increment on a stream
		{op(window, 0, zero, 0, 0, 1)},                                                   // a short WINDOW_UPDATE
		{op(rst, 0, zero, u32(cancel)...)},                                               // RST_STREAM on stream 0
		{op(rst, 0, five, u32(cancel)...)},                                               // RST_STREAM on an idle stream
		{get, op(rst, 0, last, 0, 8)},                                                    // a short RST_STREAM
		{op(settings, 0, zero, 0, 4, 0, 0, 0)},                                           // SETTINGS of 5 bytes
		{op(settings, 0, zero, append(setting(http2.SettingMaxFrameSize, 1<<14), 0)...)}, // 7 bytes
		{op(settings, ack, zero, setting(http2.SettingEnablePush, 0)...)},                // an ACK with a payload
		{op(settings, 0, one, setting(http2.SettingEnablePush, 0)...)},                   // SETTINGS on a stream
		{op(settings, 0, zero, setting(http2.SettingEnablePush, 2)...)},
		{op(settings, 0, zero, setting(http2.SettingMaxFrameSize, 1)...)},
		{get, op(settings, 0, zero, setting(http2.SettingInitialWindowSize, 1<<31)...)},
		{op(settings, 0, zero, append(setting(http2.SettingHeaderTableSize, 1<<16), setting(http2.SettingMaxFrameSize, 1<<24-1)...)...), get},
		{op(priority, 0, one, append(u32(1), 15)...)},                 // PRIORITY depending on itself
		{op(priority, 0, one, 0, 0, 0, 3)},                            // PRIORITY of 4 bytes
		{op(priority, 0, zero, append(u32(1), 15)...)},                // PRIORITY on stream 0
		{op(headers, eh|es|padded, nw|req, 0xff)},                     // padded HEADERS, pad > length
		{op(headers, eh|es|padded, nw)},                               // padded HEADERS, no pad length
		{op(headers, eh, nw|req), op(data, es|padded, last, 10, 'x')}, // padded DATA, pad > length
		{op(headers, eh, nw|req), op(data, es|padded, last, 1, 'x', 0)},
		{op(ping, 0, zero, []byte("short")...)},
		{op(ping, 0, one, []byte("pingpong")...)},
		{op(ping, ack, zero, []byte("pingpong")...)}, // an unsolicited ACK
		{op(goaway, 0, zero, u32(0, 0)...), get},     // the client's GOAWAY, then a request
		{op(goaway, 0, one, u32(0, 0)...)},
		{op(push, eh, one|req, u32(2)...)},                         // PUSH_PROMISE from a client
		{op(headers, eh|es, even|req)},                             // HEADERS on a server's stream
		{op(headers, eh|es, top|req), op(headers, eh|es, one|req)}, // a lower stream after the highest
		{op(headers, eh|es, nw|req|h2fzReserved)},                  // the reserved bit
		{op(headers, eh|es, zero|req)},                             // HEADERS on stream 0
		{op(headers, eh|es, one|req), op(headers, eh|es, one|req)}, // the same stream twice
		{op(data, es, one|h2fzOversized)},                          // a length past any SETTINGS_MAX_FRAME_SIZE
		{op(0xfe, 0xff, one|h2fzOversized)},
	}
	out := make([][]byte, len(seeds))
	for i, s := range seeds {
		out[i] = h2fzEncode(s...)
	}
	return out
}
