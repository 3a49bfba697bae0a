package h2guard

import (
	"bytes"
	"slices"
	"testing"

	"golang.org/x/net/http2"
)

// frames writes a preface and a mix of frames with x/net's framer.
func frames(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: false})
	fr.WriteContinuation(1, true, []byte("defg"))
	fr.WriteData(1, false, bytes.Repeat([]byte("x"), 300))
	fr.WriteDataPadded(1, false, nil, []byte{0, 0, 0})
	fr.WriteWindowUpdate(0, 70000)
	fr.WritePing(false, [8]byte{1})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteRawFrame(0x42, 0, 0, []byte("ext"))
	fr.WriteData(3, true, nil)
	return buf.Bytes()
}

// scanAll scans b cut into pieces of at most step bytes.
func scanAll(b []byte, step int) []Frame {
	s := scanner{skip: prefaceLen, prefixes: true}
	var out []Frame
	for len(b) > 0 {
		piece := b[:min(step, len(b))]
		b = b[len(piece):]
		for len(piece) > 0 {
			n, f, ok := s.next(piece)
			piece = piece[n:]
			if ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func TestScannerReadsFramesCutAnywhere(t *testing.T) {
	b := frames(t)
	whole := scanAll(b, len(b))
	want := []struct {
		typ    uint8
		stream uint32
		length uint32
	}{{typeSettings, 0, 6}, {typeHeaders, 1, 3}, {typeContinuation, 1, 4}, {typeData, 1, 300},
		{typeData, 1, 4}, {typeWindowUpdate, 0, 4}, {typePing, 0, 8}, {typeRSTStream, 1, 4},
		{0x42, 0, 3}, {typeData, 3, 0}}
	if len(whole) != len(want) {
		t.Fatalf("%d frames, want %d: %+v", len(whole), len(want), whole)
	}
	for i, w := range want {
		if f := whole[i]; f.Type != w.typ || f.Stream != w.stream || f.Length != w.length {
			t.Errorf("frame %d: %+v, want type %d stream %d length %d", i, f, w.typ, w.stream, w.length)
		}
	}
	if inc := whole[5].increment(); inc != 70000 {
		t.Errorf("WINDOW_UPDATE increment %d, want 70000", inc)
	}
	if !whole[4].emptyData() || whole[3].emptyData() || whole[9].emptyData() {
		t.Error("emptyData: only the padded frame without data and END_STREAM is empty")
	}
	for step := 1; step < 40; step++ {
		if got := scanAll(b, step); !slices.Equal(got, whole) {
			t.Fatalf("cut every %d bytes: %+v, want %+v", step, got, whole)
		}
	}
}

func TestToBoundary(t *testing.T) {
	b := frames(t)[prefaceLen:]
	// Stop at every offset: what toBoundary says ends the frame must end it.
	for cut := 0; cut < len(b); cut++ {
		s := scanner{}
		for q := b[:cut]; len(q) > 0; {
			n, _, _ := s.next(q)
			q = q[n:]
		}
		k, whole := s.toBoundary(b[cut:])
		if !whole {
			t.Fatalf("cut %d: the rest of the stream does not end the frame", cut)
		}
		for q := b[cut : cut+k]; len(q) > 0; {
			n, _, _ := s.next(q)
			q = q[n:]
		}
		if !s.boundary() {
			t.Fatalf("cut %d: %d more bytes do not reach a boundary", cut, k)
		}
		if k2, _ := s.toBoundary(b[cut+k:]); k2 != 0 {
			t.Fatalf("cut %d: at a boundary toBoundary says %d", cut, k2)
		}
	}
}

// FuzzScanner: however a stream is cut, the scanner reads the same frames.
func FuzzScanner(f *testing.F) {
	f.Add(frames(f), uint8(7))
	f.Add([]byte(http2.ClientPreface+"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x01"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		whole := scanAll(b, len(b)+1)
		if got := scanAll(b, int(step)+1); !slices.Equal(got, whole) {
			t.Fatalf("cut every %d: %+v, want %+v", int(step)+1, got, whole)
		}
	})
}
