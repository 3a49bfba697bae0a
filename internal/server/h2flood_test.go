package server

// HTTP/2 floods (issue 11 point 3): a client written with x/net's framer
// floods one h2c connection while a normal client is served on another.
// Each flood must end with a GOAWAY ENHANCE_YOUR_CALM and a close, counted
// by reason, long before the flood ends; the other client must not notice.
// Nothing here measures time: bounds are counts, and deadlines only catch
// a hang. Every test dials h2c itself, so both protocol runs are valid.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/h2guard"
)

// floodFrames is how many frames (or HEADERS+RST_STREAM pairs) a flood
// sends at most: ten times the largest burst, so a guard that lets one
// kind through unbounded is caught.
const floodFrames = 10000

// floodRig is a levee with an h2c listener in front of a backend that
// counts what reaches it, and a bystander: a normal HTTP/2 client on a
// connection of its own.
type floodRig struct {
	p       *proxy
	addr    string
	resets  atomic.Int64 // requests for /reset the backend saw
	bigBody []byte
	client  *http.Client // the bystander's

	// made counts the requests for /made the backend saw, each held until
	// levee cancels it (madeLeft) or the test ends (madeServed).
	made, madeLeft, madeServed atomic.Int64
	hold                       *gate

	stopBy context.CancelFunc
	byDone chan struct{}
	byErr  atomic.Value // error: the bystander's first failure
}

func newFloodRig(t *testing.T) *floodRig {
	t.Helper()
	rig := &floodRig{bigBody: bytes.Repeat([]byte("b"), 1<<20), hold: newGate()}
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/reset":
			rig.resets.Add(1)
		case "/made":
			rig.made.Add(1)
			if rig.hold.wait(r) {
				rig.madeServed.Add(1)
			} else {
				rig.madeLeft.Add(1)
			}
			return
		}
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/big" {
			w.Write(rig.bigBody)
			return
		}
		io.WriteString(w, "ok")
	})
	t.Cleanup(rig.hold.open) // before the backend closes, which waits for its handlers
	rig.p = startProxy(t, photosApp(backend, "", "listen: [{addr: 127.0.0.1:0, h2c: true}]\n"))
	rig.addr = rig.p.srv.Addrs()[0].String()
	rig.client = newClient(t, &http.Transport{Protocols: h2cOnly()})
	return rig
}

// bystand sends one GET on the bystander's connection.
func (rig *floodRig) bystand(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rig.addr+"/by", nil)
	req.Host = "photos.test"
	resp, err := rig.client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("bystander: %d %q, want 200 ok", resp.StatusCode, body)
	}
	return nil
}

// startBystander requests again and again until checkBystander.
func (rig *floodRig) startBystander(t *testing.T) {
	t.Helper()
	if err := rig.bystand(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rig.stopBy, rig.byDone = cancel, make(chan struct{})
	go func() {
		defer close(rig.byDone)
		for {
			err := rig.bystand(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				rig.byErr.CompareAndSwap(nil, err)
				return
			}
		}
	}()
}

// checkBystander stops the bystander and fails t if it was ever refused;
// it must be served after the flood too.
func (rig *floodRig) checkBystander(t *testing.T) {
	t.Helper()
	rig.stopBy()
	recv(t, rig.byDone, "the bystander to stop")
	if err, _ := rig.byErr.Load().(error); err != nil {
		t.Errorf("the other client failed during the flood: %v", err)
	}
	if err := rig.bystand(context.Background()); err != nil {
		t.Errorf("after the flood: %v", err)
	}
}

// h2Client is one raw HTTP/2 (h2c prior knowledge) client connection.
// The test's goroutine writes; a reader goroutine reads every frame.
type h2Client struct {
	t    *testing.T
	conn net.Conn
	bw   *bufio.Writer
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder

	goaway    chan *http2.GoAwayFrame // the first GOAWAY
	readDone  chan struct{}
	gotGoAway atomic.Bool
	pingAcks  atomic.Int64
	responses atomic.Int64 // HEADERS frames
	data      atomic.Int64 // DATA frames
	rsts      atomic.Int64 // RST_STREAM frames
}

// dialH2 opens a connection, exchanges SETTINGS (settings are the
// client's) and starts reading.
func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, guard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &h2Client{t: t, conn: conn, bw: bufio.NewWriterSize(conn, 64<<10),
		goaway: make(chan *http2.GoAwayFrame, 1), readDone: make(chan struct{})}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr = http2.NewFramer(c.bw, conn)
	c.fr.SetMaxReadFrameSize(1 << 20)
	conn.SetDeadline(time.Now().Add(guard))
	io.WriteString(c.bw, http2.ClientPreface)
	c.fr.WriteSettings(settings...)
	c.flush()
	// The server's SETTINGS, acked before anything else is written.
	f, err := c.fr.ReadFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		t.Fatalf("first frame %v, %v; want the server's SETTINGS", f, err)
	}
	c.fr.WriteSettingsAck()
	c.flush()
	go c.read()
	return c
}

func (c *h2Client) read() {
	defer close(c.readDone)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if !c.gotGoAway.Swap(true) {
				c.goaway <- f
			}
		case *http2.PingFrame:
			if f.IsAck() {
				c.pingAcks.Add(1)
			}
		case *http2.HeadersFrame:
			c.responses.Add(1)
		case *http2.DataFrame:
			c.data.Add(1)
		case *http2.RSTStreamFrame:
			c.rsts.Add(1)
		}
	}
}

func (c *h2Client) flush() error {
	c.conn.SetWriteDeadline(time.Now().Add(guard))
	return c.bw.Flush()
}

// request writes a HEADERS frame for method path on stream.
func (c *h2Client) request(stream uint32, method, path string, endStream bool) error {
	return c.requestTo(stream, method, "photos.test", path, endStream)
}

// requestTo is request for another host.
func (c *h2Client) requestTo(stream uint32, method, host, path string, endStream bool) error {
	c.hbuf.Reset()
	for _, hf := range [][2]string{{":method", method}, {":scheme", "http"}, {":authority", host}, {":path", path}} {
		c.henc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: c.hbuf.Bytes(),
		EndStream: endStream, EndHeaders: true})
}

// flood calls frame(i) for i up to floodFrames, flushing now and then,
// until the server's GOAWAY arrives or the connection fails.
func (c *h2Client) flood(frame func(i int) error) int {
	return c.floodN(floodFrames, frame)
}

// floodN is flood for up to n frames.
func (c *h2Client) floodN(n int, frame func(i int) error) int {
	for i := range n {
		if c.gotGoAway.Load() {
			return i
		}
		if err := frame(i); err != nil {
			return i
		}
		if i%64 == 63 && c.flush() != nil {
			return i
		}
	}
	c.flush()
	return n
}

// wantGoAway waits for the GOAWAY and checks it is the guard's.
func (c *h2Client) wantGoAway() *http2.GoAwayFrame {
	c.t.Helper()
	select {
	case g := <-c.goaway:
		if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
			c.t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
		}
		return g
	case <-c.readDone:
		c.t.Fatal("connection closed without a GOAWAY")
	case <-time.After(guard):
		c.t.Fatal("no GOAWAY within the guard time")
	}
	return nil
}

// floodCase runs one flood against a fresh rig: setup opens what the flood
// needs, frame writes its i-th frame.
func floodCase(t *testing.T, reason h2guard.Reason, settings []http2.Setting,
	setup func(rig *floodRig, c *h2Client), frame func(c *h2Client, i int) error) (*floodRig, *h2Client, *http2.GoAwayFrame) {
	t.Helper()
	rig := newFloodRig(t)
	rig.startBystander(t)
	c := dialH2(t, rig.addr, settings...)
	if setup != nil {
		setup(rig, c)
	}
	sent := c.flood(func(i int) error {
		if i == 8 { // mid-flood, one request the test waits for
			if err := c.flush(); err == nil {
				if err := rig.bystand(context.Background()); err != nil {
					t.Errorf("during the flood: %v", err)
				}
			}
		}
		return frame(c, i)
	})
	g := c.wantGoAway()
	c.conn.Close()
	recv(t, c.readDone, "the flooding connection to end")
	t.Logf("%s: client wrote %d frames; GOAWAY last stream %d", reason, sent, g.LastStreamID)
	rig.checkBystander(t)
	waitFor(t, "the flood metric", func() bool {
		return rig.p.metric("levee_h2_flood_closed_total", map[string]string{"reason": string(reason)}) == 1
	})
	return rig, c, g
}

func TestH2FloodRapidReset(t *testing.T) {
	const pairs = floodFrames
	rig, c, g := floodCase(t, h2guard.ReasonReset, nil, nil, func(c *h2Client, i int) error {
		stream := uint32(2*i + 1)
		if err := c.request(stream, http.MethodGet, "/reset", true); err != nil {
			return err
		}
		return c.fr.WriteRSTStream(stream, http2.ErrCodeCancel)
	})
	lim := h2guard.Default(64 << 10)
	// Every reset beyond the burst needs a response the server started;
	// the GOAWAY names the last stream it took.
	accepted := int64(g.LastStreamID+1) / 2
	if max := int64(lim.Resets.Burst) + c.responses.Load() + 64; accepted > max {
		t.Errorf("the server took %d streams, want at most the burst of resets and one per response (%d)", accepted, max)
	}
	if accepted >= pairs/2 {
		t.Errorf("the GOAWAY came after %d of %d pairs, want well before the end", accepted, pairs)
	}
	// A stream reset before it is forwarded never reaches the backend; one
	// reset on its way there may. Without the yield before forwarding, a
	// fifth of them would.
	if n := rig.resets.Load(); n > accepted/10 {
		t.Errorf("the backend saw %d of the %d reset streams, want at most a tenth", n, accepted)
	} else {
		t.Logf("the backend saw %d of the %d reset streams the server took", n, accepted)
	}
}

// TestH2ResetWhileQueuedNeverReachesBackend: streams reset while they wait
// for admission leave the queue, and the backend never sees them.
func TestH2ResetWhileQueuedNeverReachesBackend(t *testing.T) {
	const queued = 100
	var resets atomic.Int64
	hold, held := newGate(), make(chan struct{}, 1)
	defer hold.open()
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			resets.Add(1)
		}
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			hold.wait(r)
		}
	})
	p := startProxy(t, photosApp(backend, "{concurrency: 1, queue: {max_len: 1000, max_wait: 1m}}",
		"listen: [{addr: 127.0.0.1:0, h2c: true}]\n"))
	c := dialH2(t, p.srv.Addrs()[0].String())
	c.request(1, http.MethodGet, "/hold", true)
	c.flush()
	recv(t, held, "the request holding the only slot")
	for i := range queued {
		s := uint32(3 + 2*i)
		c.request(s, http.MethodGet, "/reset", true)
		c.fr.WriteRSTStream(s, http2.ErrCodeCancel)
	}
	c.flush()
	waitFor(t, "every reset stream to leave the queue", func() bool {
		return p.metric("levee_requests_total", map[string]string{"app": "photos", "code": "499"}) == queued
	})
	hold.open()
	waitFor(t, "the held response", func() bool { return c.responses.Load() == 1 })
	if n := resets.Load(); n != 0 {
		t.Errorf("the backend saw %d streams reset while queued, want none", n)
	}
}

func TestH2FloodContinuation(t *testing.T) {
	floodCase(t, h2guard.ReasonContinuation, nil, func(rig *floodRig, c *h2Client) {
		c.hbuf.Reset()
		c.henc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes()})
	}, func(c *h2Client, i int) error {
		return c.fr.WriteContinuation(1, false, nil) // empty: Go's own bound counts bytes only
	})
}

func TestH2FloodPing(t *testing.T) {
	_, c, _ := floodCase(t, h2guard.ReasonPing, nil, nil, func(c *h2Client, i int) error {
		return c.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)})
	})
	if n, burst := c.pingAcks.Load(), int64(h2guard.Default(64<<10).Pings.Burst); n > burst+1 {
		t.Errorf("%d pings answered, want at most the burst (%d) and the first", n, burst)
	}
}

func TestH2FloodSettings(t *testing.T) {
	floodCase(t, h2guard.ReasonSettings, nil, nil, func(c *h2Client, i int) error {
		return c.fr.WriteSettings()
	})
}

func TestH2FloodEmptyData(t *testing.T) {
	floodCase(t, h2guard.ReasonEmptyData, nil, func(rig *floodRig, c *h2Client) {
		c.request(1, http.MethodPost, "/upload", false)
	}, func(c *h2Client, i int) error {
		return c.fr.WriteData(1, false, nil)
	})
}

// TestH2FloodWindowUpdate: a window opened a byte at a time (the server
// would send a DATA frame per byte), and updates the server sent no data
// to earn.
func TestH2FloodWindowUpdate(t *testing.T) {
	t.Run("zero window dribble", func(t *testing.T) {
		_, c, _ := floodCase(t, h2guard.ReasonSmallWindow, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}},
			func(rig *floodRig, c *h2Client) {
				c.request(1, http.MethodGet, "/big", true)
			}, func(c *h2Client, i int) error {
				return c.fr.WriteWindowUpdate(1, 1)
			})
		if n, burst := c.data.Load(), int64(h2guard.Default(64<<10).SmallWindowUpdates.Burst); n > burst+1 {
			t.Errorf("%d DATA frames sent, want at most one per small update allowed (%d)", n, burst)
		}
	})
	t.Run("updates on a closed stream", func(t *testing.T) {
		floodCase(t, h2guard.ReasonWindowUpdate, nil, func(rig *floodRig, c *h2Client) {
			c.request(1, http.MethodGet, "/", true)
			c.flush()
			waitFor(t, "the response", func() bool { return c.data.Load() > 0 })
		}, func(c *h2Client, i int) error {
			return c.fr.WriteWindowUpdate(1, 1<<16) // a closed stream: ignored, but read
		})
	})
}

// TestH2FloodBoundary is a client that uses what the floods abuse, as a
// busy browser or gRPC client might: it is never closed.
func TestH2FloodBoundary(t *testing.T) {
	rig := newFloodRig(t)
	c := dialH2(t, rig.addr)
	stream := uint32(1)
	next := func() uint32 { s := stream; stream += 2; return s }
	answered := func(n int64) {
		t.Helper()
		c.flush()
		waitFor(t, "responses", func() bool { return c.responses.Load() >= n })
	}
	var want int64
	chunk := make([]byte, 4<<10) // three uploads' 64 frames fit the connection's 1 MiB window
	for round := range 20 {
		// Ten requests, a PING, a SETTINGS now and then, an empty DATA
		// frame on an upload, a window update.
		for range 10 {
			c.request(next(), http.MethodGet, "/", true)
			want++
		}
		c.fr.WritePing(false, [8]byte{byte(round)})
		if round%5 == 0 {
			c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		}
		up := next()
		c.request(up, http.MethodPost, "/upload", false)
		c.fr.WriteData(up, false, nil)
		c.fr.WriteData(up, true, []byte("body"))
		want++
		c.fr.WriteWindowUpdate(0, 1<<20)
		answered(want)
		// A navigation: twenty streams opened and cancelled at once.
		for range 20 {
			s := next()
			c.request(s, http.MethodGet, "/", true)
			c.fr.WriteRSTStream(s, http2.ErrCodeCancel)
		}
		// Uploads answered before their body is read (here levee's 404
		// for a host it does not serve): the server ends each stream with
		// RST_STREAM NO_ERROR, and answers each DATA frame still in
		// flight, up to a whole stream window of them, with STREAM_CLOSED.
		for range 3 {
			up := next()
			c.requestTo(up, http.MethodPost, "nobody.test", "/upload", false)
			for i := range 64 {
				c.fr.WriteData(up, i == 63, chunk)
			}
			want++
		}
	}
	// Thirty pings in a row with nothing in between: a keepalive burst.
	for i := range 30 {
		c.fr.WritePing(false, [8]byte{0xff, byte(i)})
	}
	c.request(next(), http.MethodGet, "/last", true)
	want++
	answered(want)
	if c.gotGoAway.Load() {
		t.Fatal("the legitimate client got a GOAWAY")
	}
	for _, r := range h2guard.Reasons() {
		if n := rig.p.metric("levee_h2_flood_closed_total", map[string]string{"reason": string(r)}); n != 0 {
			t.Errorf("levee_h2_flood_closed_total{reason=%q} = %v, want 0", r, n)
		}
	}
}

// TestH2OverTLSNeedsAdequateSecurity: the listener applies RFC 9113 §9.2
// (net/http cannot, under the guard): h2 over TLS 1.2 with a CBC suite is
// refused with GOAWAY INADEQUATE_SECURITY, HTTP/1.1 with it is served.
func TestH2OverTLSNeedsAdequateSecurity(t *testing.T) {
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	certFile, keyFile, roots := selfSigned(t)
	p := startProxy(t, photosApp(backend, "", fmt.Sprintf("listen:\n  - {addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}\n", certFile, keyFile)))
	dial := func(proto string) *tls.Conn {
		conn, err := tls.Dial("tcp", p.srv.Addrs()[0].String(), &tls.Config{RootCAs: roots, ServerName: "photos.test",
			NextProtos: []string{proto}, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(guard))
		return conn
	}
	conn := dial("h2")
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	fr.WriteSettings()
	var goaway *http2.GoAwayFrame
	for goaway == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading: %v, want a GOAWAY", err)
		}
		goaway, _ = f.(*http2.GoAwayFrame)
	}
	if goaway.ErrCode != http2.ErrCodeInadequateSecurity {
		t.Errorf("GOAWAY %v, want INADEQUATE_SECURITY", goaway.ErrCode)
	}
	conn = dial("http/1.1")
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: photos.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("HTTP/1.1 with the same suite: %d %q, want 200 ok", resp.StatusCode, body)
	}
}
