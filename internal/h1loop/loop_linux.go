package h1loop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported reports whether this system has the loop.
const Supported = true

// A Conn's state, read and changed atomically: the loop and the holder of
// a request hand the connection to each other through it.
const (
	stLoop     uint32 = iota // the loop reads and answers it
	stHeld                   // a holder has it (Hold); the loop reads nothing
	stDisarmed               // held, and the loop has stopped watching it for reads
	stLinger                 // answered and shut for writing: the loop discards what still comes
	stClosed
	stShaking // a TLS connection in its handshake, on a goroutine (tls_linux.go)
)

// Conn is one client connection of the loop. Its methods say who may
// call them: the loop (inside Handler.Request) or the holder of a held
// request.
type Conn struct {
	l     *loop
	fd    int
	peer  netip.AddrPort
	state atomic.Uint32
	// gone is set by the loop when the client closed its side or the
	// connection failed while a request was held.
	gone atomic.Bool
	// idleAt is when a holder released the connection (unix nanos): the
	// loop's idle deadline runs from it.
	idleAt atomic.Int64
	entry  entry
	// tls is a TLS connection's session; nil for a plain one.
	tls *session
	// in holds bytes read and not yet consumed: a partial head, or what a
	// client sent behind a held request. nil when there are none.
	in []byte
	// out holds what the loop could not write at once; closing: close once
	// it is written.
	out     []byte
	closing bool
	// linger: closing is a lingering close (see Release); lingered counts
	// the bytes discarded.
	linger   bool
	lingered int
	// killed: Kill asked for it to be closed.
	killed atomic.Bool
	// writable is signalled by the loop when a holder waits to write.
	wmu      sync.Mutex
	writable chan struct{}
	wantOut  atomic.Bool
	// rearm: the holder changed what the loop watches (waitWritable), so
	// Release has the loop set it again.
	rearm bool
	// Requests is how many requests the connection has begun.
	Requests uint64
	// Value is the handler's, for its own state of the connection.
	Value any
}

// Peer is the client's address.
func (c *Conn) Peer() netip.AddrPort { return c.peer }

// Gone reports whether the client is known to have left (its side closed,
// or the connection failed) while a request was held.
func (c *Conn) Gone() bool { return c.gone.Load() }

// Server serves HTTP/1.1 connections on event loops.
type Server struct {
	o     Options
	mu    sync.Mutex
	loops []*loop
	done  chan struct{}
	once  sync.Once
	// draining: Shutdown has begun; a connection closes once idle.
	draining atomic.Bool
	// acceptMu is held for reading by a loop while it accepts; paused
	// (under it) is PauseAccept's, and lf the listener's descriptor the
	// loops accept from (nil once Shutdown or Serve's end closed it).
	acceptMu sync.RWMutex
	paused   bool
	lf       *os.File
	open     atomic.Int64 // connections the loops have (held ones too)
	local    net.Addr     // the listener's address
	// shaking counts the TLS handshakes under way, shakes holds their
	// connections (under shakeMu), so Close can end them.
	shaking sync.WaitGroup
	shakeMu sync.Mutex
	shakes  map[*Conn]struct{}
}

// New returns a server; it starts nothing.
func New(o Options) (*Server, error) {
	if o.Handler == nil {
		return nil, errors.New("h1loop: no handler")
	}
	if o.MaxHead <= 0 {
		o.MaxHead = 8 << 10
	}
	if o.HeadTimeout <= 0 {
		o.HeadTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Minute
	}
	if o.Tick <= 0 {
		o.Tick = 100 * time.Millisecond
	}
	if o.Loops <= 0 {
		o.Loops = 1
	}
	return &Server{o: o, done: make(chan struct{})}, nil
}

// Serve accepts connections on ln and serves them until Close; it
// returns ErrClosed then. ln stays open: the caller closes it.
func (s *Server) Serve(ln *net.TCPListener) error {
	lf, err := ln.File() // a descriptor of our own, in blocking mode
	if err != nil {
		return fmt.Errorf("h1loop: %w", err)
	}
	s.local = ln.Addr()
	lfd := int(lf.Fd())
	if err := syscall.SetNonblock(lfd, true); err != nil {
		lf.Close()
		return fmt.Errorf("h1loop: %w", err)
	}
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		lf.Close()
		return ErrClosed
	default:
	}
	loops := make([]*loop, s.o.Loops)
	for i := range loops {
		if loops[i], err = newLoop(s, lfd); err != nil {
			for _, l := range loops[:i] {
				l.release()
			}
			s.mu.Unlock()
			lf.Close()
			return err
		}
	}
	s.loops = loops
	s.acceptMu.Lock()
	s.lf = lf
	s.acceptMu.Unlock()
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(l.run)
	}
	wg.Wait()
	s.mu.Lock()
	for _, l := range loops {
		l.release()
	}
	s.loops = nil
	s.mu.Unlock()
	s.closeListener()
	s.endHandshakes()
	s.shaking.Wait()
	return ErrClosed
}

// closeListener closes the loops' descriptor of the listener, once no
// loop accepts: the caller's listener closing then closes the socket, and
// no connection waits in its backlog for loops that will not take it.
func (s *Server) closeListener() {
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	if s.lf != nil {
		s.lf.Close()
		s.lf = nil
	}
}

// Close stops every loop and closes the connections they hold; a held
// connection closes when its holder releases it. It returns at once;
// Serve returns once the loops have stopped.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		close(s.done)
		for _, l := range s.loops {
			l.wake() // under mu: Serve releases the loops under it too
		}
	})
	s.endHandshakes()
	return nil
}

// endHandshakes fails the TLS handshakes under way: their goroutines
// close their connections.
func (s *Server) endHandshakes() {
	s.shakeMu.Lock()
	defer s.shakeMu.Unlock()
	for c := range s.shakes {
		syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	}
}

// PauseAccept stops the loops' accepting, and returns once none accepts:
// new connections wait in the socket's backlog (for a process the socket
// is handed to, in an upgrade). Safe from any goroutine.
func (s *Server) PauseAccept() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acceptMu.Lock() // waits out an accept under way
	defer s.acceptMu.Unlock()
	if s.paused {
		return
	}
	s.paused = true
	for _, l := range s.loops {
		l.ctl(syscall.EPOLL_CTL_DEL, l.lfd, 0)
	}
}

// ResumeAccept undoes PauseAccept (not after Shutdown).
func (s *Server) ResumeAccept() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	if !s.paused {
		return
	}
	s.paused = false
	if s.draining.Load() {
		return
	}
	for _, l := range s.loops {
		l.ctl(syscall.EPOLL_CTL_ADD, l.lfd, syscall.EPOLLIN|epollExclusive)
	}
}

// Open is the number of connections the loops have, held ones included.
func (s *Server) Open() int64 { return s.open.Load() }

// Shutdown stops accepting (and closes the loops' descriptor of the
// listener: the caller's closing it then closes the socket), closes the
// idle connections and each other one once its request is answered, and waits until none is left or ctx
// ends (its error then); the loops then stop and Serve returns. A
// connection whose head is coming in is read to its end (HeadTimeout
// bounds it) and answered. Close ends what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	loops := s.loops
	for _, l := range loops {
		l.ctl(syscall.EPOLL_CTL_DEL, l.lfd, 0) // accept no more
		l.wake()                               // and close the idle ones
	}
	s.mu.Unlock()
	s.closeListener()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.open.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return s.Close()
}

// loop is one event loop: an epoll set of connections, parked in the
// runtime's netpoller (the set's descriptor is itself pollable), so a
// loop holds no thread while it waits and shares its P with the
// goroutines that forward.
type loop struct {
	s     *Server
	ep    int      // the epoll set
	epf   *os.File // ep, in the netpoller
	evfd  int      // eventfd: wakes the loop for posted work
	lfd   int      // the listener
	conns []*Conn  // by descriptor
	// watches are the other sockets the handler waits on (Conn.Watch), by
	// descriptor.
	watches []*Watch
	wheel   *wheel
	start   time.Time
	buf     []byte // one read buffer for every connection
	sealBuf []byte // what Answer seals for a TLS connection
	head    Head
	evs     []syscall.EpollEvent

	pmu     sync.Mutex
	posted  []*Conn // released connections the loop must look at
	stopped bool    // the loop has stopped: Release closes for itself

	// epMu keeps ep open while a socket is taken out of its set from
	// outside the loop (Registration), and epClosed says it no longer is.
	epMu     sync.RWMutex
	epClosed bool
}

func newLoop(s *Server, lfd int) (*loop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("h1loop: epoll: %w", err)
	}
	evfd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		syscall.Close(ep)
		return nil, fmt.Errorf("h1loop: eventfd: %w", errno)
	}
	l := &loop{s: s, ep: ep, evfd: int(evfd), lfd: lfd, start: time.Now(),
		buf: make([]byte, 64<<10), evs: make([]syscall.EpollEvent, 256)}
	l.wheel = newWheel(1024, 0)
	// Every loop accepts; EPOLLEXCLUSIVE wakes one of them per connection.
	s.acceptMu.RLock()
	paused := s.paused
	s.acceptMu.RUnlock()
	if !paused {
		if err := l.ctl(syscall.EPOLL_CTL_ADD, lfd, syscall.EPOLLIN|epollExclusive); err != nil {
			l.release()
			return nil, err
		}
	}
	if err := l.ctl(syscall.EPOLL_CTL_ADD, l.evfd, syscall.EPOLLIN); err != nil {
		l.release()
		return nil, err
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		l.release()
		return nil, fmt.Errorf("h1loop: %w", err)
	}
	l.epf = os.NewFile(uintptr(ep), "h1loop-epoll")
	return l, nil
}

const (
	epollExclusive = 1 << 28
	epollET        = 1 << 31 // syscall.EPOLLET, which is negative there
)

func (l *loop) ctl(op, fd int, events uint32) error {
	if err := syscall.EpollCtl(l.ep, op, fd, &syscall.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		return fmt.Errorf("h1loop: epoll_ctl: %w", err)
	}
	return nil
}

// release closes the loop's descriptors and every connection it still
// has. A held connection's socket is shut down, so its holder's writes
// fail, and closed by its Release.
func (l *loop) release() {
	l.pmu.Lock()
	l.stopped = true
	posted := l.posted
	l.posted = nil
	l.pmu.Unlock()
	for _, c := range posted {
		if c.state.Swap(stClosed) != stClosed {
			syscall.Close(c.fd)
		}
	}
	for _, c := range l.conns {
		if c == nil {
			continue
		}
		if c.state.CompareAndSwap(stHeld, stClosed) || c.state.CompareAndSwap(stDisarmed, stClosed) {
			syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
			continue
		}
		l.close(c)
	}
	for _, w := range l.watches {
		if w != nil {
			l.watches[w.fd] = nil
			w.l = nil
			w.on(Stopped)
		}
	}
	l.epMu.Lock()
	l.epClosed = true
	if l.epf != nil {
		l.epf.Close()
	} else {
		syscall.Close(l.ep)
	}
	l.epMu.Unlock()
	syscall.Close(l.evfd)
}

// wake makes the loop look at its posted work (and at Close).
func (l *loop) wake() {
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.evfd), uintptr(unsafe.Pointer(&one)), 8)
}

// tick is the loop's clock in ticks.
func (l *loop) tick(now time.Time) int64 { return int64(now.Sub(l.start)/l.s.o.Tick) + 1 }

func (l *loop) ticks(d time.Duration) int64 { return int64((d + l.s.o.Tick - 1) / l.s.o.Tick) }

// run is the loop: wait in the netpoller until the set has events, take
// them without blocking until there are none, expire the deadlines.
func (l *loop) run() {
	rc, err := l.epf.SyscallConn()
	if err != nil {
		return
	}
	nextTick := time.Time{}
	for {
		select {
		case <-l.s.done:
			return
		default:
		}
		now := time.Now()
		if t := l.start.Add(time.Duration(l.tick(now)) * l.s.o.Tick); !t.Equal(nextTick) {
			nextTick = t
			l.epf.SetReadDeadline(t)
		}
		// f returns true once it has handled a batch: the deadline and the
		// done channel are looked at between batches.
		err := rc.Read(func(uintptr) bool {
			n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(l.ep),
				uintptr(unsafe.Pointer(&l.evs[0])), uintptr(len(l.evs)), 0, 0, 0)
			if errno != 0 || n == 0 {
				return false // park until the set is readable
			}
			l.handle(l.evs[:n])
			return true
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		l.wheel.expire(l.tick(time.Now()), l.expire)
	}
}

// handle serves one batch of events.
func (l *loop) handle(evs []syscall.EpollEvent) {
	for i := range evs {
		fd := int(evs[i].Fd)
		switch {
		case fd == l.lfd:
			l.accept()
		case fd == l.evfd:
			l.drainPosted()
		case fd < len(l.conns) && l.conns[fd] != nil:
			l.event(l.conns[fd], evs[i].Events)
		case fd < len(l.watches) && l.watches[fd] != nil:
			l.watches[fd].on(Readable)
		}
	}
}

// accept takes one connection per readiness of the listener: the socket
// may be in blocking mode, which belongs to its open file description,
// shared with every copy (an upgrade's os/exec puts its copies, and with
// them this one, in blocking mode until the new process has started), and
// a second accept4 with nothing waiting would then block the loop. One
// connection is always waiting when the level-triggered set reports the
// socket readable to the one loop that accepts from it; more waiting make
// the next epoll_wait report it again.
func (l *loop) accept() {
	l.s.acceptMu.RLock()
	defer l.s.acceptMu.RUnlock()
	if l.s.paused || l.s.lf == nil {
		return // an event from before the pause, or the shutdown
	}
	if l.s.o.Loops > 1 {
		// Another loop, woken for the same connection, may have taken it.
		pfd := []unix.PollFd{{Fd: int32(l.lfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 0); err != nil || n == 0 {
			return
		}
	}
	nfd, sa, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
	if err != nil {
		return // EAGAIN, or another loop took it
	}
	syscall.SetsockoptInt(nfd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	c := &Conn{l: l, fd: nfd, peer: addrPort(sa)}
	c.entry.owner = c
	if nfd >= len(l.conns) {
		l.conns = append(l.conns, make([]*Conn, nfd+1-len(l.conns)+64)...)
	}
	if !l.s.o.Handler.Accepted(c) {
		// Refused: the handler answers it on the socket.
		if nc, err := fileConn(nfd); err == nil {
			l.s.o.Handler.Handoff(c, nc, nil)
		}
		return
	}
	l.s.open.Add(1)
	if l.s.o.TLS != nil {
		l.startHandshake(c)
		return
	}
	l.conns[nfd] = c
	if l.ctl(syscall.EPOLL_CTL_ADD, nfd, syscall.EPOLLIN|syscall.EPOLLRDHUP) != nil {
		l.close(c)
		return
	}
	l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(l.s.o.IdleTimeout))
}

func addrPort(sa syscall.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// event serves one readiness of c.
func (l *loop) event(c *Conn, ev uint32) {
	switch c.state.Load() {
	case stHeld, stDisarmed:
		l.heldEvent(c, ev)
		return
	case stClosed:
		return
	case stLinger:
		l.discard(c)
		return
	}
	if ev&syscall.EPOLLOUT != 0 && len(c.out) > 0 {
		if !l.flush(c) {
			return
		}
	}
	if len(c.out) > 0 || c.closing {
		if ev&(syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			l.close(c)
		}
		return // reads wait for the answer to be written
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		l.read(c)
	}
}

// heldEvent: the client sent more, closed its side, or failed while its
// request is held. The loop stops watching it (level-triggered, it would
// fire again and again) and the holder's Release looks at it again.
func (l *loop) heldEvent(c *Conn, ev uint32) {
	if ev&syscall.EPOLLOUT != 0 && c.wantOut.Load() {
		c.wantOut.Store(false)
		select {
		case c.writable <- struct{}{}:
		default:
		}
	}
	if ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		c.gone.Store(true)
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) == 0 {
		return
	}
	if c.state.CompareAndSwap(stHeld, stDisarmed) {
		l.ctl(syscall.EPOLL_CTL_DEL, c.fd, 0)
		return
	}
	if c.state.Load() == stLoop { // released meanwhile: serve it now
		l.event(c, ev)
	}
}

// read reads c once and serves the requests in what came.
func (l *loop) read(c *Conn) {
	if c.idleAt.Load() != 0 {
		c.idleAt.Store(0) // the loop has it: its deadlines are the loop's again
	}
	var data []byte
	if c.in != nil {
		if len(c.in) == cap(c.in) {
			l.handoff(c, nil) // a head longer than MaxHead: the full engine refuses it
			return
		}
		n, ok := l.fill(c, c.in[len(c.in):cap(c.in)])
		if !ok || n == 0 {
			return
		}
		c.in = c.in[:len(c.in)+n]
		data = c.in
	} else {
		n, ok := l.fill(c, l.buf)
		if !ok || n == 0 {
			return
		}
		data = l.buf[:n]
	}
	l.serve(c, data)
}

// fill reads what c's client sent into p: n bytes, or none yet (0, true),
// or none ever (false: c closed).
func (l *loop) fill(c *Conn, p []byte) (int, bool) {
	if c.tls != nil {
		n, err := l.readTLS(c, p)
		if err == errAgain {
			return 0, true
		}
		if err != nil {
			l.close(c)
			return 0, false
		}
		return n, true
	}
	n, errno := sysRead(c.fd, p)
	if errno == syscall.EAGAIN {
		return 0, true
	}
	if errno != 0 || n == 0 {
		l.close(c)
		return 0, false
	}
	return n, true
}

// serve serves the requests at the start of data, read from c.
func (l *loop) serve(c *Conn, data []byte) {
	o := &l.s.o
	for len(data) > 0 {
		h := &l.head
		switch ParseHead(data, o.MaxHead, h) {
		case NeedMore:
			l.keep(c, data, o.MaxHead)
			l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(o.HeadTimeout))
			if c.unread() {
				c.tls.more = false
				l.read(c) // the rest may be in the session, not the socket
			}
			return
		case NotSimple:
			l.handoff(c, data)
			return
		}
		// What came behind the head is c's before the handler sees the
		// request, and the connection is held while it does: a holder may
		// release it before Request returns.
		l.keep(c, data[h.Len:], 0)
		c.Requests++
		c.state.Store(stHeld)
		v := l.s.o.Handler.Request(c, h)
		if v == Held {
			return
		}
		c.state.Store(stLoop)
		if v == Close || c.closing {
			l.closeAfterOut(c, true)
			return
		}
		if len(c.out) > 0 {
			return // what the client sent behind waits until the answer is out
		}
		data, c.in = c.in, nil
	}
	c.in = nil
	l.idle(c)
}

// keep makes data (a view of the loop's buffer or of c.in) c's unread
// bytes, in a buffer of its own of at least size bytes.
func (l *loop) keep(c *Conn, data []byte, size int) {
	if len(data) == 0 {
		c.in = nil
		return
	}
	if c.in != nil && unsafe.SliceData(data) == unsafe.SliceData(c.in) && cap(c.in) >= size {
		c.in = c.in[:len(data)]
		return
	}
	in := make([]byte, len(data), max(size, len(data)))
	copy(in, data)
	c.in = in
}

// handoff gives c's socket and unread bytes to the handler.
func (l *loop) handoff(c *Conn, data []byte) {
	if data == nil {
		data = c.in
	}
	in := append([]byte(nil), data...)
	l.forget(c)
	nc, err := fileConn(c.fd)
	if err != nil {
		l.s.o.Handler.Closed(c)
		return
	}
	l.s.o.Handler.Handoff(c, nc, in)
}

// fileConn is the socket fd, in blocking mode, its descriptor closed.
func fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "h1loop-conn")
	nc, err := net.FileConn(f)
	f.Close()
	return nc, err
}

// unread reports whether c's TLS session may hold bytes the loop has not
// read: the loop reads it before waiting for the socket.
func (c *Conn) unread() bool { return c.tls != nil && c.tls.more }

// forget takes c out of the loop without closing its socket.
func (l *loop) forget(c *Conn) {
	l.s.open.Add(-1)
	l.ctl(syscall.EPOLL_CTL_DEL, c.fd, 0)
	l.wheel.remove(&c.entry)
	l.conns[c.fd] = nil
	c.state.Store(stClosed)
	c.in, c.out = nil, nil
}

// close closes c's socket (in the loop).
func (l *loop) close(c *Conn) {
	if l.conns[c.fd] != c {
		return
	}
	c.state.Store(stClosed)
	l.s.open.Add(-1)
	l.wheel.remove(&c.entry)
	l.conns[c.fd] = nil
	// Out of the set before the close: see Registration.Drop.
	l.ctl(syscall.EPOLL_CTL_DEL, c.fd, 0)
	syscall.Close(c.fd)
	c.in, c.out = nil, nil
	l.s.o.Handler.Closed(c)
}

// expire: a connection's deadline passed.
func (l *loop) expire(owner any) {
	c, ok := owner.(*Conn)
	if !ok {
		owner.(*Watch).on(TimedOut)
		return
	}
	switch c.state.Load() {
	case stHeld, stDisarmed:
		// The holder keeps its own time; look again later.
		l.wheel.set(&c.entry, l.wheel.now+l.ticks(min(l.s.o.HeadTimeout, l.s.o.IdleTimeout)))
		return
	}
	if at := c.idleAt.Swap(0); at != 0 && c.state.Load() == stLoop {
		// Released since the deadline was set: idle from then.
		due := l.tick(time.Unix(0, at)) + l.ticks(l.s.o.IdleTimeout)
		if due > l.wheel.now {
			l.wheel.set(&c.entry, due)
			return
		}
	}
	if len(c.in) > 0 && len(c.out) == 0 && c.state.Load() == stLoop && l.s.o.OnHeadTimeout != nil {
		// A head that did not come in time is answered, as the full
		// engine answers one (408), then closed lingering.
		if ans := l.s.o.OnHeadTimeout(c); len(ans) > 0 {
			if c.tls != nil {
				ans, _ = c.tls.seal(ans, nil)
			}
			sysWrite(c.fd, ans)
			l.closeAfterOut(c, true)
			return
		}
	}
	l.close(c)
}

// Answer writes p to c in the loop (inside Handler.Request). What the
// socket does not take at once is written as it drains, and nothing more
// is read from c until then.
func (c *Conn) Answer(p []byte) {
	l := c.l
	if c.tls != nil {
		sealed, err := c.tls.seal(p, l.sealBuf)
		if err != nil {
			c.closing = true
			return
		}
		if p = sealed; cap(sealed) <= sealKeep {
			l.sealBuf = sealed[:0]
		}
	}
	if len(c.out) == 0 {
		n, errno := sysWrite(c.fd, p)
		if errno == 0 && n == len(p) {
			return
		}
		if errno != 0 && errno != syscall.EAGAIN {
			c.closing = true
			return
		}
		if n > 0 {
			p = p[n:]
		}
		// Only writability until it is out: level-triggered, an unread
		// request would wake the loop again and again.
		l.ctl(syscall.EPOLL_CTL_MOD, c.fd, syscall.EPOLLOUT)
		l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(l.s.o.WriteTimeout))
	}
	c.out = append(c.out, p...)
}

// flush writes c.out as far as the socket takes it; false if c closed.
func (l *loop) flush(c *Conn) bool {
	n, errno := sysWrite(c.fd, c.out)
	if errno != 0 && errno != syscall.EAGAIN {
		l.close(c)
		return false
	}
	c.out = c.out[:copy(c.out, c.out[max(n, 0):])]
	if len(c.out) > 0 {
		return true
	}
	c.out = nil
	if c.closing {
		l.closeAfterOut(c, c.linger)
		return false
	}
	l.ctl(syscall.EPOLL_CTL_MOD, c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP)
	if len(c.in) > 0 {
		// Requests that came behind the answer.
		in := c.in
		c.in = nil
		l.serve(c, in)
		return c.state.Load() == stLoop && l.conns[c.fd] == c
	}
	l.idle(c)
	return c.state.Load() == stLoop
}

// idle: c waits for its next request; draining, it closes instead.
func (l *loop) idle(c *Conn) {
	if c.unread() && !c.killed.Load() {
		c.tls.more = false
		l.read(c)
		return
	}
	if l.s.draining.Load() || c.killed.Load() {
		l.close(c)
		return
	}
	l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(l.s.o.IdleTimeout))
}

// LingerTime and LingerBytes bound a lingering close: what a client still
// sends after its answer is read and discarded for at most this long and
// this much, so that closing with its bytes unread (the kernel answers
// them with a reset, which can destroy the answer before the client reads
// it) waits for the client's own close instead.
const (
	LingerTime  = time.Second
	LingerBytes = 1 << 20
)

// closeAfterOut closes c once what it has to write is out; linger: shut
// for writing then, and discard what still comes (LingerTime).
func (l *loop) closeAfterOut(c *Conn, linger bool) {
	c.closing, c.linger = true, linger
	if len(c.out) > 0 {
		return // flush comes back here
	}
	if !linger || syscall.Shutdown(c.fd, syscall.SHUT_WR) != nil {
		l.close(c)
		return
	}
	c.in = nil
	c.state.Store(stLinger)
	l.ctl(syscall.EPOLL_CTL_MOD, c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP)
	l.wheel.set(&c.entry, l.tick(time.Now())+l.ticks(LingerTime))
}

// discard reads and drops what a lingering connection's client sends,
// until it closes or sends too much.
func (l *loop) discard(c *Conn) {
	n, errno := sysRead(c.fd, l.buf)
	if errno == syscall.EAGAIN {
		return
	}
	if c.lingered += max(n, 0); errno != 0 || n == 0 || c.lingered >= LingerBytes {
		l.close(c)
	}
}

// Write writes p to c, for the holder of a held request: all of it, or an
// error once deadline passes (zero: none) or the socket fails.
func (c *Conn) Write(p []byte, deadline time.Time) (int, error) {
	if c.tls == nil {
		return c.write(p, deadline)
	}
	bp := sealBufs.Get().(*[]byte)
	sealed, err := c.tls.seal(p, *bp)
	if err == nil {
		_, err = c.write(sealed, deadline)
	}
	if cap(sealed) <= sealKeep {
		*bp = sealed[:0]
		sealBufs.Put(bp)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// write writes p to the socket, as Write.
func (c *Conn) write(p []byte, deadline time.Time) (int, error) {
	written := 0
	for len(p) > 0 {
		n, errno := sysWrite(c.fd, p)
		if n > 0 {
			written += n
			p = p[n:]
			continue
		}
		if errno != syscall.EAGAIN {
			if errno == 0 {
				errno = syscall.EIO
			}
			return written, errno
		}
		if err := c.waitWritable(deadline); err != nil {
			return written, err
		}
	}
	return written, nil
}

// waitWritable waits, for the holder, until the loop sees c writable.
func (c *Conn) waitWritable(deadline time.Time) error {
	c.wmu.Lock()
	if c.writable == nil {
		c.writable = make(chan struct{}, 1)
	}
	c.wmu.Unlock()
	c.rearm = true
	c.wantOut.Store(true)
	ev := &syscall.EpollEvent{Events: syscall.EPOLLOUT | syscall.EPOLLONESHOT, Fd: int32(c.fd)}
	err := syscall.EpollCtl(c.l.ep, syscall.EPOLL_CTL_MOD, c.fd, ev)
	if err == syscall.ENOENT { // the loop stopped watching it (heldEvent)
		err = syscall.EpollCtl(c.l.ep, syscall.EPOLL_CTL_ADD, c.fd, ev)
	}
	if err != nil {
		return err
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.writable:
		return nil
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
}

// ReleaseMode is how Release ends a hold.
type ReleaseMode uint8

const (
	Keep   ReleaseMode = iota // the connection waits for its next request
	Drop                      // it closes
	Linger                    // it closes lingering (LingerTime)
)

// Release gives a held connection back to the loop (for the holder, once
// the answer is written). The holder must not use c afterwards.
func (c *Conn) Release(m ReleaseMode) {
	l := c.l
	c.idleAt.Store(time.Now().UnixNano())
	if m == Keep && !c.rearm && len(c.in) == 0 && !c.unread() && !l.s.draining.Load() && c.state.CompareAndSwap(stHeld, stLoop) {
		return // still watched: the client's next request wakes the loop
	}
	if m != Keep {
		c.closing, c.linger = true, m == Linger
	}
	if !l.post(c) {
		syscall.Close(c.fd) // release shut it down and left it to us
	}
}

// post hands c to the loop (drainPosted); false if the loop has stopped.
func (l *loop) post(c *Conn) bool {
	l.pmu.Lock()
	if l.stopped {
		l.pmu.Unlock()
		return false
	}
	l.posted = append(l.posted, c)
	first := len(l.posted) == 1
	l.pmu.Unlock()
	if first {
		l.wake()
	}
	return true
}

// drainPosted takes back the connections released with work for the loop.
func (l *loop) drainPosted() {
	var n [8]byte
	sysRead(l.evfd, n[:])
	l.pmu.Lock()
	posted := l.posted
	l.posted = nil
	l.pmu.Unlock()
	for _, c := range posted {
		st := c.state.Load()
		if st == stShaking {
			l.adopt(c)
			continue
		}
		if st == stClosed || l.conns[c.fd] != c {
			continue
		}
		if st == stLinger || (st == stLoop && c.killed.Load()) {
			l.close(c)
			continue
		}
		if !l.takeBack(c, st) {
			continue
		}
		if c.closing {
			l.closeAfterOut(c, c.linger)
			continue
		}
		l.next(c)
	}
	if l.s.draining.Load() {
		// Shutdown: close the connections that wait for a request. One
		// that has not sent its first has FreshGrace to send it: no client
		// sends a connection's first request again when it is closed
		// unanswered.
		now := l.tick(time.Now())
		for _, c := range l.conns {
			if c == nil || c.state.Load() != stLoop || len(c.in) > 0 || len(c.out) > 0 {
				continue
			}
			if c.Requests > 0 {
				l.close(c)
			} else if due := now + l.ticks(FreshGrace); c.entry.due == 0 || due < c.entry.due {
				l.wheel.set(&c.entry, due)
			}
		}
	}
}

// takeBack makes c, held until now (its state st), the loop's again:
// closed if its client left or it was killed meanwhile, watched for reads
// again if the hold stopped that; false if it closed.
func (l *loop) takeBack(c *Conn, st uint32) bool {
	c.state.Store(stLoop)
	c.wantOut.Store(false)
	if c.gone.Load() || c.killed.Load() {
		l.close(c)
		return false
	}
	if st == stDisarmed || c.rearm {
		c.rearm = false
		if l.ctl(syscall.EPOLL_CTL_MOD, c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP) != nil &&
			l.ctl(syscall.EPOLL_CTL_ADD, c.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP) != nil {
			l.close(c)
			return false
		}
	}
	return true
}

// next serves what c's client sent behind its last request, or waits for
// the next one.
func (l *loop) next(c *Conn) {
	if len(c.in) > 0 {
		in := c.in
		c.in = nil
		l.serve(c, in)
		return
	}
	l.idle(c)
}

// Reply ends c's held request in the loop (from a Watch's callback): it
// writes p as Answer does, then gives c back to the loop as Release(m)
// would, with no wake-up of the loop. A connection killed or closed
// meanwhile is closed, and p dropped.
func (c *Conn) Reply(p []byte, m ReleaseMode) {
	l := c.l
	st := c.state.Load()
	if st == stClosed || st == stLoop || l.conns[c.fd] != c || !l.takeBack(c, st) {
		return
	}
	c.Answer(p)
	if m != Keep {
		c.closing, c.linger = true, m == Linger
	}
	if c.closing {
		l.closeAfterOut(c, c.linger)
		return
	}
	if len(c.out) > 0 {
		return // flush goes on from there
	}
	l.next(c)
}

// Event is what a Watch's callback is told.
type Event uint8

const (
	// Readable: the socket has bytes to read, or its peer closed, or it
	// failed. Edge-triggered: it comes when more arrives, so the callback
	// reads until EAGAIN (or until it has what it needs).
	Readable Event = iota
	// TimedOut: the Watch's deadline passed; it is still watched.
	TimedOut
	// Stopped: the loop has stopped (Server.Close); the Watch is over and
	// the socket is the handler's to close. Its Conn's Release closes it.
	Stopped
)

// Watch is a socket other than a client's that a loop's handler waits on,
// in the loop: a backend connection whose answer the loop reads itself.
// The socket stays the handler's: the loop only reads its readiness.
type Watch struct {
	l     *loop
	fd    int
	entry entry
	on    func(Event)
}

// Registration is a socket's place in one loop's epoll set, kept with the
// socket (a backend connection) from one Watch to the next, so that a
// socket a loop watches again costs no system call. The socket is in the
// set edge-triggered, and stays there whoever uses it between watches (an
// event for a socket the loop does not watch is ignored), until another
// loop watches it, which takes it out of the first's set, or Drop. The
// zero value is in no set. Only the socket's user of the moment may touch
// it.
type Registration struct{ l *loop }

// In reports whether r is in c's loop's set.
func (r *Registration) In(c *Conn) bool { return r.l != nil && r.l == c.l }

// Drop takes fd out of the set r is in, from any goroutine: call it before
// the socket closes. A close alone takes a socket out of an epoll set only
// once no descriptor of it is left anywhere, and a child process being
// started holds copies of every descriptor until it execs: events of a
// socket closed meanwhile would come under its number, which the loop may
// have given to a new connection.
func (r *Registration) Drop(fd int) {
	l := r.l
	if l == nil {
		return
	}
	r.l = nil
	l.epMu.RLock()
	if !l.epClosed {
		syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, fd, nil)
	}
	l.epMu.RUnlock()
}

// Watch has c's loop call on, in the loop, with fd's events until Unwatch;
// timeout (0: none) bounds the wait from now, and a TimedOut event says it
// passed. reg is fd's registration, updated. Called in the loop (inside
// Handler.Request or a Watch's callback), with w not watching.
func (c *Conn) Watch(w *Watch, reg *Registration, fd int, timeout time.Duration, on func(Event)) error {
	l := c.l
	if reg.l != l {
		reg.Drop(fd)
		ev := &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(fd)}
		if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, ev); err != nil {
			return fmt.Errorf("h1loop: epoll_ctl: %w", err)
		}
		reg.l = l
	}
	*w = Watch{l: l, fd: fd, on: on}
	w.entry.owner = w
	if fd >= len(l.watches) {
		l.watches = append(l.watches, make([]*Watch, fd+1-len(l.watches)+64)...)
	}
	l.watches[fd] = w
	if timeout > 0 {
		l.wheel.set(&w.entry, l.tick(time.Now())+l.ticks(timeout))
	}
	return nil
}

// SetTimeout moves w's deadline to timeout from now (0: none), in the loop.
func (w *Watch) SetTimeout(timeout time.Duration) {
	l := w.l
	if l == nil {
		return
	}
	if timeout <= 0 {
		l.wheel.set(&w.entry, 0)
		return
	}
	l.wheel.set(&w.entry, l.tick(time.Now())+l.ticks(timeout))
}

// Unwatch ends w (in the loop): the loop forgets the socket, which stays
// open, and in its set (Registration). A Watch the loop stopped is already
// over.
func (w *Watch) Unwatch() {
	l := w.l
	if l == nil {
		return
	}
	w.l = nil
	l.wheel.remove(&w.entry)
	l.watches[w.fd] = nil
}

// FreshGrace is how long Shutdown waits for the first request of a
// connection that has not sent one, as fasthttp's does.
const FreshGrace = 5 * time.Second

// Kill closes c from any goroutine: at once if the loop has it, when its
// holder releases it if held (its socket is shut down, so the holder's
// writes fail).
func (c *Conn) Kill() {
	if c.killed.Swap(true) {
		return
	}
	switch c.state.Load() {
	case stHeld, stDisarmed:
		syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
		return // Release posts it, and the loop closes it then
	case stShaking:
		// The handshake fails, and closes it; if it is over, the loop
		// closes it as it takes it (adopt).
		s := c.l.s
		s.shakeMu.Lock()
		if _, ok := s.shakes[c]; ok {
			syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
		}
		s.shakeMu.Unlock()
		return
	case stClosed:
		return
	}
	c.l.post(c) // if the loop has stopped, release closed it
}

func sysRead(fd int, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}

func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// Control calls f with c's socket descriptor, for the holder of a held
// request (while held, the descriptor stays c's).
func (c *Conn) Control(f func(fd uintptr)) { f(uintptr(c.fd)) }
