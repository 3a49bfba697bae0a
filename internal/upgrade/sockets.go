package upgrade

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Sockets are the listening sockets of one levee process, by name (the
// address as configured, with a prefix per kind: "proxy 127.0.0.1:0"). A
// process started by an upgrade takes the sockets it inherited by name
// before binding new ones, so a listener whose configured address did not
// change keeps its socket, port 0 included. Safe for concurrent use.
//
// Every socket is handed out wrapped in a gate, so that the process can
// stop accepting for the handover (Pause) and start again if it fails
// (Resume) without closing the socket.
type Sockets struct {
	mu        sync.Mutex
	inherited map[string]*net.TCPListener // not yet claimed
	bound     []named
}

type named struct {
	name, asked string // asked: the name Listen was given
	ln          *net.TCPListener
	gate        *Gate
}

// Listen returns the socket called name: the inherited one of that name,
// else a new one bound to address. Only TCP sockets are handed over.
// Listeners asked for under one name (two of address 127.0.0.1:0) are
// told apart by the order they are asked for in: the second is called
// "name #2", in the new process as in the old.
func (s *Sockets) Listen(name, network, address string) (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	asked, same := name, 0
	for _, b := range s.bound {
		if b.asked == asked {
			same++
		}
	}
	if same > 0 {
		name = fmt.Sprintf("%s #%d", asked, same+1)
	}
	ln := s.inherited[name]
	delete(s.inherited, name)
	if ln == nil {
		l, err := listenConfig.Listen(context.Background(), network, address)
		if err != nil {
			return nil, err
		}
		tl, ok := l.(*net.TCPListener)
		if !ok {
			l.Close()
			return nil, fmt.Errorf("upgrade: %s: not a TCP listener", name)
		}
		ln = tl
	}
	g := newGate(ln)
	s.bound = append(s.bound, named{name: name, asked: asked, ln: ln, gate: g})
	return g, nil
}

// CloseUnclaimed closes the inherited sockets the new config no longer
// names (a listener removed or moved): the old process closes its copies
// as it exits, so the address stops accepting then.
func (s *Sockets) CloseUnclaimed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ln := range s.inherited {
		ln.Close()
		delete(s.inherited, name)
	}
}

// Pause stops every socket's accepting, and returns once no Accept is
// under way: from then on, new connections wait in the kernel's backlog.
func (s *Sockets) Pause() {
	for _, b := range s.snapshot() {
		b.gate.pause()
	}
}

// Resume undoes Pause.
func (s *Sockets) Resume() {
	for _, b := range s.snapshot() {
		b.gate.resume()
	}
}

func (s *Sockets) snapshot() []named {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]named(nil), s.bound...)
}

// nonblocking puts every bound socket back in non-blocking mode. A
// socket's mode belongs to its open file description, which the copies
// files makes share with this process's listeners (and every other
// levee's that has the socket): os/exec takes each copy's Fd(), which
// puts it, and with it all of them, in blocking mode. An Accept that then
// finds no connection waiting blocks in the kernel, out of reach of the
// deadline that Pause kicks it out with, until a connection comes.
func (s *Sockets) nonblocking() {
	for _, b := range s.snapshot() {
		if rc, err := b.ln.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = syscall.SetNonblock(int(fd), true) })
		}
	}
}

// files duplicates every bound socket for a new process, with its name.
// The caller closes the files once the process has started, and puts the
// sockets back in non-blocking mode (nonblocking).
func (s *Sockets) files() ([]string, []*os.File, error) {
	var names []string
	var files []*os.File
	for _, b := range s.snapshot() {
		f, err := b.ln.File()
		if err != nil {
			closeAll(files)
			return nil, nil, fmt.Errorf("upgrade: socket %s: %w", b.name, err)
		}
		names = append(names, b.name)
		files = append(files, f)
	}
	return names, files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Gate is a listener whose accepting can be paused. While paused, Accept
// waits (and the connections wait in the socket's backlog); Close ends it.
type Gate struct {
	ln *net.TCPListener

	mu       sync.Mutex
	paused   bool
	resumed  chan struct{} // closed by resume; made by pause
	closed   chan struct{}
	once     sync.Once
	inAccept sync.WaitGroup // Accepts in the kernel, which pause waits out
	// wakes are the local addresses of pause's own connections, which
	// Accept closes instead of returning.
	wakes map[string]bool
	// attached are the engines that accept from the socket themselves.
	attached []attached
}

type attached struct{ pause, resume func() }

func newGate(ln *net.TCPListener) *Gate {
	return &Gate{ln: ln, closed: make(chan struct{})}
}

// Accept waits while the gate is paused, then accepts.
func (g *Gate) Accept() (net.Conn, error) {
	for {
		g.mu.Lock()
		if g.paused {
			resumed := g.resumed
			g.mu.Unlock()
			select {
			case <-resumed:
				continue
			case <-g.closed:
				return nil, net.ErrClosed
			}
		}
		g.inAccept.Add(1)
		g.mu.Unlock()
		c, err := g.ln.Accept()
		g.inAccept.Done()
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // pause's kick; resume clears the deadline
		}
		if err == nil && g.woken(c) {
			continue
		}
		return c, err
	}
}

// woken closes c if it is one of pause's own connections.
func (g *Gate) woken(c net.Conn) bool {
	g.mu.Lock()
	ours := g.wakes[c.RemoteAddr().String()]
	delete(g.wakes, c.RemoteAddr().String())
	g.mu.Unlock()
	if ours {
		c.Close()
	}
	return ours
}

// wakeEvery is how long pause waits for an Accept to return before it
// connects to wake one that blocks in the kernel.
const wakeEvery = 20 * time.Millisecond

// pause stops Accept, kicking the one in the kernel out with a deadline
// in the past, and waits for it to have returned. An Accept on a socket
// in blocking mode (Sockets.nonblocking) does not see the deadline: pause
// wakes it with a connection of its own, which Accept closes.
func (g *Gate) pause() {
	g.mu.Lock()
	if !g.paused {
		g.paused = true
		g.resumed = make(chan struct{})
		_ = g.ln.SetDeadline(time.Unix(1, 0))
		for _, a := range g.attached {
			a.pause() // returns once that engine accepts no more
		}
	}
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.inAccept.Wait(); close(done) }()
	t := time.NewTimer(wakeEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			g.wake()
			t.Reset(wakeEvery)
		}
	}
}

// wake connects to the socket, so that an Accept blocked in the kernel
// returns. The connection is closed at once on this side; Accept closes
// the other. (Another process accepting on the same socket would get it
// instead, and see a client that sent nothing.)
func (g *Gate) wake() {
	addr, ok := g.ln.Addr().(*net.TCPAddr)
	if !ok {
		return
	}
	to := *addr
	if to.IP.IsUnspecified() {
		to.IP = net.IPv4(127, 0, 0, 1)
		if addr.IP.To4() == nil {
			to.IP = net.IPv6loopback
		}
	}
	// Held across the dial: the Accept it wakes looks its address up
	// only once it is noted.
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := net.DialTimeout("tcp", to.String(), wakeEvery)
	if err != nil {
		return
	}
	if g.wakes == nil {
		g.wakes = map[string]bool{}
	}
	g.wakes[c.LocalAddr().String()] = true
	c.Close()
}

func (g *Gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		g.paused = false
		_ = g.ln.SetDeadline(time.Time{})
		close(g.resumed)
		for _, a := range g.attached {
			a.resume()
		}
	}
}

// Listener is the socket, for an engine that accepts from it itself (the
// event loop), which Attaches its pause to the gate's.
func (g *Gate) Listener() *net.TCPListener { return g.ln }

// Attach makes the gate's pause and resume stop and restart an engine
// that accepts from the socket itself: pause must return once that engine
// accepts no more. Attached to a paused gate, it is paused at once.
func (g *Gate) Attach(pause, resume func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.attached = append(g.attached, attached{pause, resume})
	if g.paused {
		pause()
	}
}

// Close closes this process's copy of the socket; a process it was
// handed to keeps accepting on its own.
func (g *Gate) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.ln.Close()
}

// Addr is the socket's address.
func (g *Gate) Addr() net.Addr { return g.ln.Addr() }
