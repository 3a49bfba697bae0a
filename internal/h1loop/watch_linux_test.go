package h1loop

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// watchHandler answers /watch/... from the loop once a pipe it watches
// has bytes: the test writes them (as a backend would answer). /stall is
// watched with a timeout and answered 504 when it passes. Anything else
// is answered at once.
type watchHandler struct {
	testHandler
	timeout time.Duration
	mu      sync.Mutex
	writers []*os.File // the write end of each watch's pipe, in order
	events  chan Event // every event a callback saw
	stopped atomic.Int64
}

func (h *watchHandler) Request(c *Conn, hd *Head) Verdict {
	p := string(hd.Path)
	if !strings.HasPrefix(p, "/watch") && p != "/stall" {
		return h.testHandler.Request(c, hd)
	}
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	rfd := int(r.Fd())
	syscall.SetNonblock(rfd, true)
	path := string(hd.Path) // hd is the loop's until Request returns
	w0, reg := new(Watch), new(Registration)
	on := func(ev Event) {
		h.events <- ev
		var ans []byte
		switch ev {
		case Readable:
			buf := make([]byte, 64)
			n, _ := syscall.Read(rfd, buf)
			ans = fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Path: %s\r\n\r\n%s", max(n, 0), path, buf[:max(n, 0)])
		case TimedOut:
			ans = fmt.Appendf(nil, "HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\nX-Path: %s\r\n\r\n", path)
		case Stopped:
			h.stopped.Add(1)
			reg.Drop(rfd)
			r.Close()
			c.Release(Drop)
			return
		}
		w0.Unwatch()
		reg.Drop(rfd)
		r.Close()
		c.Reply(ans, Keep)
	}
	timeout := time.Duration(0)
	if p == "/stall" {
		timeout = h.timeout
	}
	if err := c.Watch(w0, reg, rfd, timeout, on); err != nil {
		panic(err)
	}
	h.mu.Lock()
	h.writers = append(h.writers, w)
	h.mu.Unlock()
	return Held
}

// writer waits for the i-th watch's pipe.
func (h *watchHandler) writer(t *testing.T, i int) *os.File {
	t.Helper()
	var w *os.File
	leaktest.WaitFor(t, 5*time.Second, "the watch is set", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.writers) > i {
			w = h.writers[i]
		}
		return w != nil
	})
	t.Cleanup(func() { w.Close() })
	return w
}

func newWatchHandler() *watchHandler {
	return &watchHandler{timeout: 50 * time.Millisecond, events: make(chan Event, 16)}
}

// A held request whose answer comes on another socket the loop watches is
// answered from the loop, in order with the requests pipelined behind it,
// and the connection serves on.
func TestWatchAnswersFromTheLoop(t *testing.T) {
	h := newWatchHandler()
	_, addr := start(t, h, Options{})
	c, br := dial(t, addr)
	io.WriteString(c, get("/watch/1")+get("/a")+get("/b"))
	time.Sleep(20 * time.Millisecond) // /a and /b wait behind /watch/1
	io.WriteString(h.writer(t, 0), "one")
	for _, want := range []string{"/watch/1", "/a", "/b"} {
		p, body := readAnswer(t, br)
		if p != want {
			t.Fatalf("answer is for %q, want %q", p, want)
		}
		if want == "/watch/1" && body != "one" {
			t.Fatalf("body %q, want what the watched socket had", body)
		}
	}
	if ev := <-h.events; ev != Readable {
		t.Fatalf("event %v, want Readable", ev)
	}
	// The connection serves on, and a second watch on it works as well.
	io.WriteString(c, get("/watch/2"))
	io.WriteString(h.writer(t, 1), "two")
	if p, body := readAnswer(t, br); p != "/watch/2" || body != "two" {
		t.Fatalf("answer %q %q", p, body)
	}
}

// A watch whose socket stays silent is told its timeout passed.
func TestWatchTimesOut(t *testing.T) {
	h := newWatchHandler()
	_, addr := start(t, h, Options{})
	c, br := dial(t, addr)
	io.WriteString(c, get("/stall"))
	resp := readStatus(t, br)
	if resp != 504 {
		t.Fatalf("status %d, want 504 at the watch's timeout", resp)
	}
	if ev := <-h.events; ev != TimedOut {
		t.Fatalf("event %v, want TimedOut", ev)
	}
	io.WriteString(c, get("/after"))
	wantAnswer(t, br, "/after")
}

// A client that leaves while its request waits on a watch has its
// connection closed when the answer comes, not written to.
func TestWatchClientGone(t *testing.T) {
	h := newWatchHandler()
	_, addr := start(t, h, Options{})
	c, _ := dial(t, addr)
	io.WriteString(c, get("/watch/gone"))
	w := h.writer(t, 0)
	c.Close()
	time.Sleep(30 * time.Millisecond) // the loop sees the close
	io.WriteString(w, "late")
	<-h.events
	leaktest.WaitFor(t, 5*time.Second, "the connection closed", func() bool { return h.closed.Load() == 1 })
}

// Close with a watch under way tells its callback the loop stopped; the
// connection and the handler's socket are closed.
func TestWatchStoppedByClose(t *testing.T) {
	h := newWatchHandler()
	s, addr := start(t, h, Options{})
	c, br := dial(t, addr)
	io.WriteString(c, get("/watch/x"))
	h.writer(t, 0)
	s.Close()
	leaktest.WaitFor(t, 5*time.Second, "the watch stopped", func() bool { return h.stopped.Load() == 1 })
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read an answer from a stopped server")
	}
}

func readStatus(t *testing.T, br interface{ ReadString(byte) (string, error) }) int {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var code int
	fmt.Sscanf(line, "HTTP/1.1 %d", &code)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			return code
		}
	}
}

// regHandler watches one pipe, under one Registration, for each /reg
// request, whichever loop it comes on, and answers with the loop's index.
type regHandler struct {
	testHandler
	r, w  *os.File
	mu    sync.Mutex // orders the loops' uses of reg, as a pool's lock does
	reg   Registration
	loops chan *loop
}

func (h *regHandler) Request(c *Conn, hd *Head) Verdict {
	if string(hd.Path) != "/reg" {
		return h.testHandler.Request(c, hd)
	}
	fd := int(h.r.Fd())
	w0 := new(Watch)
	on := func(ev Event) {
		if ev != Readable {
			return
		}
		buf := make([]byte, 16)
		syscall.Read(fd, buf)
		w0.Unwatch()
		h.loops <- c.l
		c.Reply([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Path: /reg\r\n\r\n"), Keep)
	}
	h.mu.Lock()
	err := c.Watch(w0, &h.reg, fd, 0, on)
	h.mu.Unlock()
	if err != nil {
		panic(err)
	}
	h.loops <- nil // watching
	return Held
}

// A socket watched by one loop and then another leaves the first's set:
// the first is not woken for it any more.
func TestRegistrationMovesBetweenLoops(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	syscall.SetNonblock(int(r.Fd()), true)
	h := &regHandler{r: r, w: w, loops: make(chan *loop, 4)}
	_, addr := start(t, h, Options{Loops: 2})
	// Requests on connections until two loops have watched the pipe.
	seen := map[*loop]bool{}
	var order []*loop
	for i := 0; len(seen) < 2; i++ {
		if i == 50 {
			t.Skip("50 connections all went to one loop")
		}
		c, br := dial(t, addr)
		io.WriteString(c, get("/reg"))
		<-h.loops
		io.WriteString(w, "x")
		l := <-h.loops
		wantAnswer(t, br, "/reg")
		if !seen[l] {
			seen[l] = true
			order = append(order, l)
		}
		c.Close()
	}
	first, last := order[0], order[1]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reg.l != last {
		t.Fatal("the registration is not the last watcher's")
	}
	ev := &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(r.Fd())}
	if err := syscall.EpollCtl(first.ep, syscall.EPOLL_CTL_MOD, int(r.Fd()), ev); err != syscall.ENOENT {
		t.Fatalf("the first loop's set still has the socket (MOD: %v)", err)
	}
	if err := syscall.EpollCtl(last.ep, syscall.EPOLL_CTL_MOD, int(r.Fd()), ev); err != nil {
		t.Fatalf("the last loop's set lacks the socket: %v", err)
	}
}
