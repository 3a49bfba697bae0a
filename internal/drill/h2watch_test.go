package drill

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// h2cServer is an h2c server whose connections the test can reach.
type h2cServer struct {
	*httptest.Server
	mu    sync.Mutex
	conns []net.Conn
}

func startH2C(t *testing.T) *h2cServer {
	t.Helper()
	s := &h2cServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// watchedDo sends one request through d and wants it answered 200.
func watchedDo(t *testing.T, d *HTTPDoer) {
	t.Helper()
	if r := d.Do(context.Background(), &Request{Host: "a.test", Path: "/"}); r.Err != nil || r.Status != 200 {
		t.Fatalf("request: %d %v", r.Status, r.Err)
	}
}

// A connection the edge closes without a GOAWAY fails the politeness
// check, though the client, idle, sees no error: only the frames tell.
func TestH2WatchFailsACloseWithoutGoAway(t *testing.T) {
	s := startH2C(t)
	start := time.Now()
	w := &h2Watch{since: func() time.Duration { return time.Since(start) }}
	d := newH2Doer(s.URL, "", nil, w)
	defer d.Close()
	watchedDo(t, d)
	s.mu.Lock()
	s.conns[0].Close() // no GOAWAY
	s.mu.Unlock()
	waitFor(t, "the client saw the close", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.conns[0].end == h2Server
	})
	watchedDo(t, d) // on a new connection, without an error
	tl := w.tally(nil)
	if tl.Conns != 2 || tl.NoGoAway != 1 || tl.GoAways != 0 || tl.Streams != 2 {
		t.Fatalf("tally %+v; want 2 connections, 1 ended without a GOAWAY, 2 streams", tl)
	}
	if c := h2Checks(tl)[0]; c.Pass {
		t.Fatalf("check %+v passed; want it failed", c)
	}
}

// A connection the edge ends with a GOAWAY (a graceful shutdown) passes,
// and the stream after it goes to the new server.
func TestH2WatchPassesAGoAway(t *testing.T) {
	old, next := startH2C(t), startH2C(t)
	start := time.Now()
	w := &h2Watch{since: func() time.Duration { return time.Since(start) }}
	d := newH2Doer(old.URL, "", nil, w)
	defer d.Close()
	watchedDo(t, d)
	run := commandRun{Start: w.since()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := old.Config.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client read the GOAWAY", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.conns[0].goAway
	})
	d.Base = next.URL // the new process, as a listener handed over would be
	watchedDo(t, d)
	run.End = w.since()
	tl := w.tally([]commandRun{run})
	if tl.Conns != 2 || tl.GoAways != 1 || tl.NoGoAway != 0 || tl.GoAwaysByRun[0] != 1 || tl.OnNew != 1 || tl.StrayOld != 0 {
		t.Fatalf("tally %+v; want 2 connections, 1 GOAWAY in run 1, 1 stream after it on the new one", tl)
	}
	for _, c := range h2Checks(tl) {
		if !c.Pass {
			t.Fatalf("check %+v failed", c)
		}
	}
}

// The tally: a stream above a GOAWAY's last is sent again, an answer
// above it, or a connection opened after the handover that then gets a
// GOAWAY before the next run, is the old process serving after it.
func TestH2TallyPhases(t *testing.T) {
	w := &h2Watch{}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	old := &h2Conn{dialed: ms(1), goAway: true, goAwayAt: ms(110), last: 3, resets: map[uint32]int64{},
		streams: []h2Stream{{1, ms(2)}, {3, ms(111)}, {5, ms(112)}}, end: h2Server, endAt: ms(150)}
	fresh := &h2Conn{dialed: ms(120), resets: map[uint32]int64{}, streams: []h2Stream{{1, ms(121)}}}
	stray := &h2Conn{dialed: ms(130), goAway: true, goAwayAt: ms(140), last: 1, above: 1,
		resets: map[uint32]int64{7: 1}, streams: []h2Stream{{1, ms(131)}}}
	w.conns = []*h2Conn{old, fresh, stray}
	tl := w.tally([]commandRun{{Start: ms(100), End: ms(200)}})
	want := h2Tally{Conns: 3, GoAways: 2, Streams: 5, AfterHandover: 4, OnNew: 2, OldAdmitted: 1, Retried: 1,
		AnsweredAbove: 1, StrayOld: 1}
	if tl.Conns != want.Conns || tl.GoAways != want.GoAways || tl.Streams != want.Streams ||
		tl.AfterHandover != want.AfterHandover || tl.OnNew != want.OnNew || tl.OldAdmitted != want.OldAdmitted ||
		tl.Retried != want.Retried || tl.AnsweredAbove != want.AnsweredAbove || tl.StrayOld != want.StrayOld ||
		tl.Resets["REFUSED_STREAM"] != 1 {
		t.Fatalf("tally %+v; want %+v and 1 REFUSED_STREAM", tl, want)
	}
	for _, c := range h2Checks(tl)[1:] {
		if c.Pass {
			t.Fatalf("check %+v passed; want it failed", c)
		}
	}
}

// The frame reader finds frames split anywhere.
func TestFrameReaderSplits(t *testing.T) {
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	frames := append([]byte{}, preface...)
	frames = append(frames, 0, 0, 0, 0x4, 0, 0, 0, 0, 0)                               // SETTINGS, empty
	frames = append(frames, 0, 0, 2, 0x1, 0x4, 0, 0, 0, 5, 0x82, 0x84)                 // HEADERS on 5
	frames = append(frames, 0, 0, 9, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0xff) // GOAWAY last 7, debug byte
	type seen struct {
		typ byte
		id  uint32
		n   int
	}
	for step := 1; step <= len(frames); step++ {
		r := frameReader{skip: len(preface)}
		var got []seen
		for p := frames; len(p) > 0; {
			n := min(step, len(p))
			r.feed(p[:n], func(typ byte, id uint32, payload []byte) {
				got = append(got, seen{typ, id, len(payload)})
				if typ == h2FrameGoAway && be32(payload) != 7 {
					t.Fatalf("step %d: GOAWAY last %d, want 7", step, be32(payload))
				}
			})
			p = p[n:]
		}
		want := []seen{{0x4, 0, 0}, {0x1, 5, 0}, {0x7, 0, 8}}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("step %d: frames %v, want %v", step, got, want)
		}
	}
}
