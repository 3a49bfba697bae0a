package h2guard

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// pingServer is a stand-in HTTP/2 server on a guarded connection: it acks
// every PING through a writer of bufSize bytes, so that its frames reach
// the connection cut into several Writes, and it writes from a goroutine
// of its own, as net/http's does.
func pingServer(t *testing.T, g *Conn, bufSize int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	acks := make(chan [8]byte, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		bw := bufio.NewWriterSize(g, bufSize)
		fr := http2.NewFramer(bw, nil)
		fr.WriteSettings()
		bw.Flush()
		for data := range acks {
			fr.WritePing(true, data)
			// A big frame too, to cut through many writes: of a type the
			// client ignores, not DATA, since a PING after DATA is free
			// (the meter would let the flood go on as the writer keeps up).
			fr.WriteRawFrame(0xfa, 0, 0, make([]byte, 3*bufSize+1))
			if bw.Flush() != nil {
				return
			}
		}
	})
	go func() {
		defer wg.Wait()
		defer close(acks)
		var preface [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(g, preface[:]); err != nil {
			done <- err
			return
		}
		fr := http2.NewFramer(nil, g)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				acks <- p.Data
			}
		}
	}()
	return done
}

func TestConnGoAwayAtAFrameBoundary(t *testing.T) {
	for _, bufSize := range []int{7, 64, 4096} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var closes atomic.Int32
		var reason atomic.Value
		opts := &Options{Limits: Default(64 << 10), Clock: &fakeClock{t: time.Unix(1e9, 0)},
			OnClose: func(r Reason) { closes.Add(1); reason.Store(r) }}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sc := <-accepted
		served := pingServer(t, Wrap(sc, opts), bufSize)

		// The client floods pings without reading, then reads everything:
		// whole frames, the last a GOAWAY.
		io.WriteString(cc, http2.ClientPreface)
		fr := http2.NewFramer(cc, cc)
		fr.WriteSettings()
		sent := 0
		for ; sent < 10*opts.Limits.Pings.Burst; sent++ {
			cc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if fr.WritePing(false, [8]byte{byte(sent)}) != nil {
				break // the guard stopped reading
			}
		}
		cc.SetReadDeadline(time.Now().Add(10 * time.Second))
		fr.SetMaxReadFrameSize(1 << 20)
		var goaway *http2.GoAwayFrame
		acks := 0
		for goaway == nil {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("buf %d: after %d acks, reading: %v (want whole frames, then a GOAWAY)", bufSize, acks, err)
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				acks++
			case *http2.GoAwayFrame:
				goaway = f
			}
		}
		if goaway.ErrCode != http2.ErrCodeEnhanceYourCalm {
			t.Errorf("buf %d: GOAWAY %v, want ENHANCE_YOUR_CALM", bufSize, goaway.ErrCode)
		}
		if acks > opts.Limits.Pings.Burst+1 {
			t.Errorf("buf %d: %d pings answered, want at most the burst (%d) and the SETTINGS' first", bufSize, acks, opts.Limits.Pings.Burst)
		}
		cc.Close()
		var ge *Error
		if err := <-served; !errors.As(err, &ge) || ge.Reason != ReasonPing || !errors.Is(err, net.ErrClosed) {
			t.Errorf("buf %d: the server read %v, want an *Error for %q that is net.ErrClosed", bufSize, err, ReasonPing)
		}
		if n := closes.Load(); n != 1 || reason.Load() != ReasonPing {
			t.Errorf("buf %d: OnClose called %d times (%v), want once for %q", bufSize, n, reason.Load(), ReasonPing)
		}
	}
}

// settingsTripPipe is a guarded pipe whose guard trips at the client's
// first SETTINGS: the client's end, and the server's, guarded.
func settingsTripPipe(t *testing.T) (net.Conn, *Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close() })
	opts := &Options{Limits: Default(64 << 10), Clock: &fakeClock{t: time.Unix(1e9, 0)}}
	opts.Limits.Settings.Burst = 0
	return a, Wrap(b, opts)
}

// TestConnGoAwayBeforeAnyOutput: a client that trips the guard before the
// server wrote a byte still gets a server preface (SETTINGS) first.
func TestConnGoAwayBeforeAnyOutput(t *testing.T) {
	a, g := settingsTripPipe(t)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(g)
		read <- err
	}()
	go func() {
		io.WriteString(a, http2.ClientPreface)
		http2.NewFramer(a, nil).WriteSettings()
	}()
	fr := http2.NewFramer(nil, a)
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := fr.ReadFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		t.Fatalf("first frame %v %v, want SETTINGS", f, err)
	}
	f, err = fr.ReadFrame()
	if gf, ok := f.(*http2.GoAwayFrame); err != nil || !ok || gf.ErrCode != http2.ErrCodeEnhanceYourCalm || gf.LastStreamID != 0 {
		t.Fatalf("second frame %v %v, want GOAWAY ENHANCE_YOUR_CALM, last stream 0", f, err)
	}
	a.Close()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Errorf("server read %v, want net.ErrClosed", err)
	}
}

// TestConnNoGoAwayAfterTheServers: a client that trips the guard after
// the server sent its own GOAWAY gets no second one. The guard's would
// name the streams the server was given, which can be above the server's
// last stream (a header block begun, not ended), and a GOAWAY's last
// stream may never go up (RFC 9113 §6.8). FuzzH2Frames found it.
func TestConnNoGoAwayAfterTheServers(t *testing.T) {
	a, g := settingsTripPipe(t)
	wrote := make(chan error, 1)
	go func() {
		fr := http2.NewFramer(g, nil)
		fr.WriteSettings()
		wrote <- fr.WriteGoAway(0, http2.ErrCodeProtocol, nil)
	}()
	fr := http2.NewFramer(nil, a)
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []http2.FrameType{http2.FrameSettings, http2.FrameGoAway} {
		if f, err := fr.ReadFrame(); err != nil || f.Header().Type != want {
			t.Fatalf("read %v %v, want %v", f, err, want)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(g) // trips the guard at the client's SETTINGS
		read <- err
	}()
	go func() {
		io.WriteString(a, http2.ClientPreface)
		http2.NewFramer(a, nil).WriteSettings()
	}()
	if f, err := fr.ReadFrame(); err == nil {
		t.Fatalf("after the server's GOAWAY the guard wrote %v, want nothing but the close", f)
	}
	a.Close()
	var ge *Error
	if err := <-read; !errors.As(err, &ge) || ge.Reason != ReasonSettings {
		t.Errorf("server read %v, want an *Error for %q", err, ReasonSettings)
	}
}
