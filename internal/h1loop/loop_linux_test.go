package h1loop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// testHandler answers by the request's path: /hold/... is held and
// answered from a goroutine after holdFor, /close is answered with
// Connection: close, anything else is answered in the loop.
type testHandler struct {
	holdFor  time.Duration
	body     []byte // the answer's body (default "ok")
	closed   atomic.Int64
	accepted atomic.Int64
	gone     atomic.Int64 // held requests whose client was gone when answered
	refuse   bool         // Accepted says no
	handoffs chan handoff
}

type handoff struct {
	c  *Conn
	nc net.Conn
	in []byte
}

func (h *testHandler) answer(path []byte, close bool) []byte {
	body := h.body
	if body == nil {
		body = []byte("ok")
	}
	conn := ""
	if close {
		conn = "Connection: close\r\n"
	}
	return fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Path: %s\r\n%s\r\n%s", len(body), path, conn, body)
}

func (h *testHandler) Accepted(c *Conn) bool { h.accepted.Add(1); return !h.refuse }
func (h *testHandler) Closed(c *Conn)        { h.closed.Add(1) }

func (h *testHandler) Request(c *Conn, hd *Head) Verdict {
	switch p := string(hd.Path); {
	case strings.HasPrefix(p, "/hold"):
		ans := h.answer(hd.Path, false)
		go func() {
			time.Sleep(h.holdFor)
			if c.Gone() {
				h.gone.Add(1)
			}
			_, err := c.Write(ans, time.Now().Add(5*time.Second))
			mode := Keep
			if err != nil {
				mode = Drop
			}
			c.Release(mode)
		}()
		return Held
	case p == "/close":
		c.Answer(h.answer(hd.Path, true))
		return Close
	default:
		c.Answer(h.answer(hd.Path, hd.Close))
		if hd.Close {
			return Close
		}
		return Answered
	}
}

// handedOff waits for the handler's next handoff.
func (h *testHandler) handedOff(t *testing.T) handoff {
	t.Helper()
	select {
	case ho := <-h.handoffs:
		return ho
	case <-time.After(5 * time.Second):
		t.Fatal("no handoff")
		return handoff{}
	}
}

func (h *testHandler) Handoff(c *Conn, nc net.Conn, in []byte) {
	if h.handoffs != nil {
		h.handoffs <- handoff{c, nc, in}
		return
	}
	nc.Close()
}

// start serves h on a loopback listener until the test ends.
func start(t *testing.T, h Handler, o Options) (*Server, string) {
	t.Helper()
	s, ln := startOn(t, h, o)
	return s, ln.Addr().String()
}

// startOn is start, with the listener.
func startOn(t *testing.T, h Handler, o Options) (*Server, *net.TCPListener) {
	t.Helper()
	leaktest.Check(t)
	o.Handler = h
	if o.Tick == 0 {
		o.Tick = 10 * time.Millisecond
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Serve: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close: a loop is stuck")
		}
		ln.Close()
	})
	return s, ln
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: a.test\r\n\r\n" }

// readAnswer reads one response and returns its X-Path and body.
func readAnswer(t *testing.T, br *bufio.Reader) (string, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a body: %v", err)
	}
	return resp.Header.Get("X-Path"), string(b)
}

// wantAnswer reads one response and fails unless it answers path.
func wantAnswer(t *testing.T, br *bufio.Reader, path string) {
	t.Helper()
	if p, _ := readAnswer(t, br); p != path {
		t.Fatalf("answer for %q, want %q", p, path)
	}
}

func TestAnswersInTheLoopInOrder(t *testing.T) {
	_, addr := start(t, &testHandler{}, Options{})
	c, br := dial(t, addr)
	for i := range 3 {
		io.WriteString(c, get(fmt.Sprintf("/a%d", i)))
		if p, _ := readAnswer(t, br); p != fmt.Sprintf("/a%d", i) {
			t.Fatalf("answer %d is for %q", i, p)
		}
	}
	// Pipelined, a head split across writes, and a held request among
	// answered ones: answers come in the requests' order.
	io.WriteString(c, get("/p1")+get("/hold/p2")+get("/p3")+"GET /p4 HTTP/1.1\r\nHo")
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, "st: a.test\r\n\r\n")
	for _, want := range []string{"/p1", "/hold/p2", "/p3", "/p4"} {
		if p, _ := readAnswer(t, br); p != want {
			t.Fatalf("answer is for %q, want %q", p, want)
		}
	}
}

func TestHeldRequestsOnManyConnections(t *testing.T) {
	h := &testHandler{holdFor: time.Millisecond}
	_, addr := start(t, h, Options{})
	serveMany(t, addr, 100, 20, 2)
	leaktest.WaitFor(t, 5*time.Second, "every connection closed", func() bool { return h.closed.Load() == 100 })
}

// serveMany sends reqs requests on each of conns connections at once,
// every holdEvery-th of them held, and wants each answered in order.
func serveMany(t *testing.T, addr string, conns, reqs, holdEvery int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for j := range reqs {
				path := fmt.Sprintf("/x%d-%d", i, j)
				if j%holdEvery == 0 {
					path = "/hold" + path
				}
				io.WriteString(c, get(path))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				if got := resp.Header.Get("X-Path"); got != path {
					errs <- fmt.Errorf("answer for %q, want %q", got, path)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestCloseAnswersThenCloses(t *testing.T) {
	_, addr := start(t, &testHandler{}, Options{})
	c, br := dial(t, addr)
	io.WriteString(c, get("/close")+get("/never"))
	wantAnswer(t, br, "/close")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close, read %v, want EOF", err)
	}
	// HTTP/1.0 without keep-alive closes too.
	c2, br2 := dial(t, addr)
	io.WriteString(c2, "GET /ten HTTP/1.0\r\nHost: a.test\r\n\r\n")
	readAnswer(t, br2)
	if _, err := br2.ReadByte(); err != io.EOF {
		t.Fatalf("after an HTTP/1.0 request, read %v, want EOF", err)
	}
}

func TestHandsOffWhatIsNotSimple(t *testing.T) {
	h := &testHandler{handoffs: make(chan handoff, 1)}
	_, addr := start(t, h, Options{})
	c, br := dial(t, addr)
	post := "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"
	io.WriteString(c, get("/first")+post)
	wantAnswer(t, br, "/first")
	ho := h.handedOff(t)
	fc := ho.nc
	defer fc.Close()
	// The engine that takes over has every byte after the first request,
	// and the socket.
	if !strings.HasPrefix(post, string(ho.in)) || len(ho.in) == 0 {
		t.Fatalf("handed off %q, want a prefix of %q", ho.in, post)
	}
	io.WriteString(fc, "HTTP/1.1 204 No Content\r\nX-Path: /up\r\n\r\n")
	wantAnswer(t, br, "/up")
}

func TestHandsOffAHeadTooLong(t *testing.T) {
	h := &testHandler{handoffs: make(chan handoff, 1)}
	_, addr := start(t, h, Options{MaxHead: 256})
	c, _ := dial(t, addr)
	long := "GET / HTTP/1.1\r\nHost: a.test\r\nX-Long: " + strings.Repeat("a", 300) + "\r\n\r\n"
	io.WriteString(c, long[:100])
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, long[100:])
	ho := h.handedOff(t)
	ho.nc.Close()
	if !strings.HasPrefix(long, string(ho.in)) || len(ho.in) < 256 {
		t.Fatalf("handed off %d bytes, want the first 256 at least of the head", len(ho.in))
	}
}

func TestTimeouts(t *testing.T) {
	h := &testHandler{}
	_, addr := start(t, h, Options{IdleTimeout: 50 * time.Millisecond, HeadTimeout: 50 * time.Millisecond})
	idle, br := dial(t, addr)
	io.WriteString(idle, get("/one"))
	readAnswer(t, br)
	partial, pbr := dial(t, addr)
	io.WriteString(partial, "GET / HTTP/1.1\r\n")
	silent, sbr := dial(t, addr)
	for _, r := range []*bufio.Reader{br, pbr, sbr} {
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("read %v, want EOF once the timeout passed", err)
		}
	}
	_ = silent
	leaktest.WaitFor(t, 5*time.Second, "the three closed", func() bool { return h.closed.Load() == 3 })
}

func TestHeadTimeoutIsAnswered(t *testing.T) {
	h := &testHandler{}
	answer := "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	_, addr := start(t, h, Options{HeadTimeout: 50 * time.Millisecond, IdleTimeout: time.Minute,
		OnHeadTimeout: func(*Conn) []byte { return []byte(answer) }})
	c, br := dial(t, addr)
	// Released by a holder, then a head that never ends: its deadline is
	// the head's, not the idle one the release set.
	io.WriteString(c, get("/hold/a"))
	readAnswer(t, br)
	io.WriteString(c, "GET / HTTP/1.1\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("got %v, %v; want the 408", resp, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the 408: read %v, want EOF", err)
	}
}

func TestIdleTimeoutRunsFromTheRelease(t *testing.T) {
	h := &testHandler{holdFor: 150 * time.Millisecond}
	_, addr := start(t, h, Options{IdleTimeout: 100 * time.Millisecond, HeadTimeout: 100 * time.Millisecond})
	c, br := dial(t, addr)
	io.WriteString(c, get("/hold/slow"))
	wantAnswer(t, br, "/hold/slow")
	// Held longer than the idle timeout, then released: still open.
	io.WriteString(c, get("/after"))
	wantAnswer(t, br, "/after")
}

func TestHolderSeesTheClientGone(t *testing.T) {
	h := &testHandler{holdFor: 100 * time.Millisecond}
	_, addr := start(t, h, Options{})
	c, _ := dial(t, addr)
	io.WriteString(c, get("/hold/x"))
	time.Sleep(20 * time.Millisecond)
	c.Close()
	leaktest.WaitFor(t, 5*time.Second, "the holder saw the client gone", func() bool { return h.gone.Load() == 1 })
	leaktest.WaitFor(t, 5*time.Second, "closed", func() bool { return h.closed.Load() == 1 })
}

// A client that reads slowly: answers larger than the socket takes are
// written as it drains, in the loop and by a holder.
func TestLargeAnswersToASlowReader(t *testing.T) {
	h := &testHandler{body: bytes.Repeat([]byte("z"), 8<<20)}
	_, addr := start(t, h, Options{})
	for _, path := range []string{"/big", "/hold/big"} {
		c, br := dial(t, addr)
		io.WriteString(c, get(path)+get("/next"))
		time.Sleep(50 * time.Millisecond)
		p, body := readAnswer(t, br)
		if p != path || len(body) != len(h.body) {
			t.Fatalf("answer for %q with %d bytes, want %q with %d", p, len(body), path, len(h.body))
		}
		if p, _ := readAnswer(t, br); p != "/next" {
			t.Fatalf("then an answer for %q", p)
		}
	}
}

func TestRefusedAtAccept(t *testing.T) {
	h := &testHandler{refuse: true}
	_, addr := start(t, h, Options{})
	_, br := dial(t, addr)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read a byte from a connection the handler refused")
	}
	if h.accepted.Load() != 1 || h.closed.Load() != 0 {
		t.Fatalf("accepted %d closed %d, want 1 and 0 (Closed is for accepted connections)", h.accepted.Load(), h.closed.Load())
	}
}

func TestCloseWithAHeldRequest(t *testing.T) {
	h := &testHandler{holdFor: 200 * time.Millisecond}
	s, addr := start(t, h, Options{})
	c, br := dial(t, addr)
	idle, ibr := dial(t, addr)
	io.WriteString(idle, get("/a"))
	readAnswer(t, ibr)
	io.WriteString(c, get("/hold/x"))
	time.Sleep(50 * time.Millisecond)
	s.Close()
	if _, err := ibr.ReadByte(); err == nil {
		t.Fatal("an idle connection stayed open after Close")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read an answer after Close shut the held connection down")
	}
}

func TestShutdownAnswersWhatIsHeldAndClosesTheRest(t *testing.T) {
	h := &testHandler{holdFor: 100 * time.Millisecond}
	s, addr := start(t, h, Options{})
	idle, ibr := dial(t, addr)
	io.WriteString(idle, get("/a"))
	readAnswer(t, ibr)
	bbr, done := shutdownWhileHeld(t, s, addr)
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF at Shutdown", err)
	}
	if p, _ := readAnswer(t, bbr); p != "/hold/b" {
		t.Fatalf("held request answered for %q", p)
	}
	if _, err := bbr.ReadByte(); err != io.EOF {
		t.Fatalf("after its answer: read %v, want EOF", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// shutdownWhileHeld sends /hold/b on a connection of its own and, while
// it is held, begins s's Shutdown, whose result comes on done.
func shutdownWhileHeld(t *testing.T, s *Server, addr string) (br *bufio.Reader, done chan error) {
	t.Helper()
	busy, br := dial(t, addr)
	io.WriteString(busy, get("/hold/b"))
	time.Sleep(20 * time.Millisecond)
	done = make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	return br, done
}

// TestShutdownLetsTheSocketClose: once Shutdown has begun, the loops
// hold no descriptor of the listener, so the caller's close closes the
// socket, and a client that dials during the drain is refused rather than
// left in a backlog no loop takes from.
func TestShutdownLetsTheSocketClose(t *testing.T) {
	h := &testHandler{holdFor: 300 * time.Millisecond}
	s, ln := startOn(t, h, Options{})
	addr := ln.Addr().String()
	bbr, done := shutdownWhileHeld(t, s, addr)
	leaktest.WaitFor(t, 5*time.Second, "the loops' listener closed", func() bool {
		s.acceptMu.RLock()
		defer s.acceptMu.RUnlock()
		return s.lf == nil
	})
	ln.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("a dial during the drain connected")
	}
	wantAnswer(t, bbr, "/hold/b") // the drain goes on
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownGivesUpAtItsContext(t *testing.T) {
	h := &testHandler{holdFor: 300 * time.Millisecond}
	s, addr := start(t, h, Options{})
	c, _ := dial(t, addr)
	io.WriteString(c, get("/hold/slow"))
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the context's deadline", err)
	}
	if s.Open() != 1 {
		t.Fatalf("%d open, want the held one", s.Open())
	}
}

func TestKill(t *testing.T) {
	h := &testHandler{holdFor: 100 * time.Millisecond}
	conns := make(chan *Conn, 2)
	_, addr := start(t, &killHandler{testHandler: h, conns: conns}, Options{})
	idle, ibr := dial(t, addr)
	io.WriteString(idle, get("/a"))
	readAnswer(t, ibr)
	(<-conns).Kill()
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("killed idle connection: read %v, want EOF", err)
	}
	held, hbr := dial(t, addr)
	io.WriteString(held, get("/hold/x"))
	(<-conns).Kill()
	if _, err := hbr.ReadByte(); err == nil {
		t.Fatal("a killed held connection was answered")
	}
	leaktest.WaitFor(t, 5*time.Second, "both closed", func() bool { return h.closed.Load() == 2 })
}

// killHandler passes each request's connection to the test.
type killHandler struct {
	*testHandler
	conns chan *Conn
}

func (k *killHandler) Request(c *Conn, hd *Head) Verdict {
	v := k.testHandler.Request(c, hd)
	k.conns <- c
	return v
}

// A client that sends more behind a request answered with a close still
// reads its answer: the loop lingers rather than resetting.
func TestCloseLingers(t *testing.T) {
	_, addr := start(t, &testHandler{}, Options{})
	c, br := dial(t, addr)
	// Bytes behind the request that the loop does not read (past its
	// buffer): closed with them unread, the socket would send a reset.
	c.Write(append([]byte(get("/close")), bytes.Repeat([]byte("x"), 256<<10)...))
	time.Sleep(20 * time.Millisecond)
	wantAnswer(t, br, "/close")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read %v, want EOF (a reset would be an error)", err)
	}
}

// While accepting is paused, a new connection waits in the backlog (its
// request unanswered); resumed, it is accepted and answered.
func TestPauseAccept(t *testing.T) {
	h := &testHandler{}
	s, addr := start(t, h, Options{})
	before, bbr := dial(t, addr)
	leaktest.WaitFor(t, 5*time.Second, "the first connection accepted", func() bool { return h.accepted.Load() == 1 })
	s.PauseAccept()
	c, br := dial(t, addr) // the kernel completes it: the backlog
	io.WriteString(c, get("/waits"))
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("answered while accepting was paused")
	}
	// Connections already accepted are served meanwhile.
	io.WriteString(before, get("/before"))
	wantAnswer(t, bbr, "/before")
	if h.accepted.Load() != 1 {
		t.Fatalf("%d accepted while paused, want 1 (before the pause)", h.accepted.Load())
	}
	s.ResumeAccept()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	wantAnswer(t, br, "/waits")
}

// An upgrade's os/exec puts the listening socket, shared by every copy, in
// blocking mode for a while: the loop must not block in accept4 then.
func TestAcceptsFromASocketInBlockingMode(t *testing.T) {
	_, ln := startOn(t, &testHandler{}, Options{})
	addr := ln.Addr().String()
	c1, br1 := dial(t, addr)
	c1.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c1, get("/one"))
	readAnswer(t, br1)
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	fl, _ := unix.FcntlInt(f.Fd(), syscall.F_GETFL, 0) // Fd, as os/exec: the socket is in blocking mode from here
	if fl&syscall.O_NONBLOCK != 0 {
		t.Fatal("the socket is still non-blocking")
	}
	defer f.Close()
	c2, br2 := dial(t, addr)
	c2.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c2, get("/two"))
	wantAnswer(t, br2, "/two")
	io.WriteString(c1, get("/three"))
	wantAnswer(t, br1, "/three")
}

// TestManyLoops: loops that share one listener (EPOLLEXCLUSIVE, a poll
// before accept4) serve every connection to its end, answered in a loop
// or held, pause and resume accepting together, and shut down together.
func TestManyLoops(t *testing.T) {
	h := &loopsHandler{testHandler: testHandler{holdFor: time.Millisecond}}
	s, addr := start(t, h, Options{Loops: 3})
	serveMany(t, addr, 60, 10, 3)
	s.PauseAccept()
	c, err := net.Dial("tcp", addr) // into the backlog: no loop takes it
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond)
	if n := h.accepted.Load(); n != 60 {
		t.Fatalf("%d connections accepted while paused, want the 60 before", n)
	}
	s.ResumeAccept()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, get("/after"))
	wantAnswer(t, bufio.NewReader(c), "/after")
	c.Close()
	serveMany(t, addr, 30, 10, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := h.closed.Load(); got != 91 {
		t.Fatalf("%d connections closed, want 91", got)
	}
	t.Logf("connections per loop: %v", h.perLoop())
}

// loopsHandler is testHandler, counting the connections each loop accepts.
type loopsHandler struct {
	testHandler
	mu    sync.Mutex
	loops map[*loop]int
}

func (h *loopsHandler) Accepted(c *Conn) bool {
	h.mu.Lock()
	if h.loops == nil {
		h.loops = map[*loop]int{}
	}
	h.loops[c.l]++
	h.mu.Unlock()
	return h.testHandler.Accepted(c)
}

func (h *loopsHandler) perLoop() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n []int
	for _, v := range h.loops {
		n = append(n, v)
	}
	return n
}
