// Command forwardfloor is the floor of a request forwarded from an event
// loop: one goroutine on one epoll loop holds the clients' sockets and a
// pool of keep-alive connections to one backend, reads a request, writes it
// to an idle backend connection as it came, and writes the backend's answer
// to the client when the whole of it has been read. No goroutine wakes and
// nothing parks per request: the backend's socket is in the same loop as
// the client's. None of levee's steps either: no routing, limits,
// forwarding headers, framing checks or metrics.
//
// It answers a planning question, in bench/proxy.sh beside nginx and
// fasthttp's own proxy idiom (bench/bareproxy): what a levee that forwards
// from its loops could cost at best, against what a goroutine per request
// costs (issue 19, "the loop forwards a simple request itself").
//
// It is a measuring stick, not a proxy: requests without a body, one at a
// time per connection (no pipelining), responses framed by Content-Length
// only, writes whole or not at all, no timeouts.
package main

import (
	"bytes"
	"flag"
	"log"
	"net/netip"
	"syscall"
	"unsafe"
)

// sock is one socket the loop holds: a client's, or a backend
// connection's.
type sock struct {
	fd      int
	backend bool
	peer    *sock  // a client's backend connection in flight, and back
	resp    []byte // a backend connection's answer, read so far
	want    int    // its whole length once the head is in; 0 before
}

type floor struct {
	ep      int
	backend syscall.SockaddrInet4
	socks   map[int]*sock
	idle    []*sock // backend connections between requests
	in      []byte  // one read buffer for every client: read, forwarded, forgotten
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18086", "address to serve on (IPv4)")
	backend := flag.String("backend", "127.0.0.1:9101", "the one backend (IPv4)")
	flag.Parse()
	lap, err := netip.ParseAddrPort(*listen)
	if err != nil || !lap.Addr().Is4() {
		log.Fatalf("forwardfloor: -listen %q: want an IPv4 address and port", *listen)
	}
	bap, err := netip.ParseAddrPort(*backend)
	if err != nil || !bap.Addr().Is4() {
		log.Fatalf("forwardfloor: -backend %q: want an IPv4 address and port", *backend)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	must(syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1))
	must(syscall.Bind(lfd, &syscall.SockaddrInet4{Port: int(lap.Port()), Addr: lap.Addr().As4()}))
	must(syscall.Listen(lfd, 4096))
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		log.Fatal(err)
	}
	must(syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}))
	f := &floor{ep: ep, backend: syscall.SockaddrInet4{Port: int(bap.Port()), Addr: bap.Addr().As4()},
		socks: map[int]*sock{}, in: make([]byte, 64<<10)}
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				f.accept(lfd)
				continue
			}
			s := f.socks[fd]
			if s == nil {
				continue // closed earlier in this batch
			}
			if s.backend {
				f.backendReadable(s)
			} else {
				f.clientReadable(s)
			}
		}
	}
}

func (f *floor) accept(lfd int) {
	for {
		c, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: accepted all
		}
		syscall.SetsockoptInt(c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if syscall.EpollCtl(f.ep, syscall.EPOLL_CTL_ADD, c, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(c)}) != nil {
			syscall.Close(c)
			continue
		}
		f.socks[c] = &sock{fd: c}
	}
}

var end = []byte("\r\n\r\n")

func (f *floor) clientReadable(c *sock) {
	m, e := read(c.fd, f.in)
	if e == syscall.EAGAIN {
		return
	}
	if e != 0 || m == 0 {
		f.close(c)
		return
	}
	req := f.in[:m]
	if c.peer != nil || bytes.Index(req, end) != len(req)-len(end) {
		f.close(c) // a second request in flight, a pipelined or partial one: not measured here
		return
	}
	b := f.take()
	if b == nil {
		f.close(c)
		return
	}
	if n, e := write(b.fd, req); e != 0 || n != len(req) {
		f.close(b)
		f.close(c)
		return
	}
	c.peer, b.peer = b, c
}

// take is an idle backend connection, or a new one.
func (f *floor) take() *sock {
	if n := len(f.idle); n > 0 {
		b := f.idle[n-1]
		f.idle = f.idle[:n-1]
		return b
	}
	// A blocking connect to the loopback is done at once; the socket is
	// made non-blocking after.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if syscall.Connect(fd, &f.backend) != nil || syscall.SetNonblock(fd, true) != nil {
		syscall.Close(fd)
		return nil
	}
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if syscall.EpollCtl(f.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}) != nil {
		syscall.Close(fd)
		return nil
	}
	b := &sock{fd: fd, backend: true, resp: make([]byte, 0, 4096)}
	f.socks[fd] = b
	return b
}

var contentLength = []byte("\r\ncontent-length:")

func (f *floor) backendReadable(b *sock) {
	c := b.peer
	if c == nil {
		f.close(b) // readable while idle: the backend closed it, or spoke unasked
		return
	}
	if cap(b.resp)-len(b.resp) < 4096 {
		b.resp = append(b.resp, make([]byte, 4096)...)[:len(b.resp)]
	}
	m, e := read(b.fd, b.resp[len(b.resp):cap(b.resp)])
	if e == syscall.EAGAIN {
		return
	}
	if e != 0 || m == 0 {
		f.close(b)
		f.close(c)
		return
	}
	b.resp = b.resp[:len(b.resp)+m]
	if b.want == 0 {
		h := bytes.Index(b.resp, end)
		if h < 0 {
			return
		}
		head := bytes.ToLower(b.resp[:h+2]) // a measuring stick: the allocation is small and rare beside the syscalls
		i := bytes.Index(head, contentLength)
		if i < 0 {
			f.close(b)
			f.close(c)
			return
		}
		v := head[i+len(contentLength):]
		v = v[:bytes.IndexByte(v, '\r')]
		n := 0
		for _, d := range bytes.TrimSpace(v) {
			n = n*10 + int(d-'0')
		}
		b.want = h + len(end) + n
	}
	if len(b.resp) < b.want {
		return
	}
	if n, e := write(c.fd, b.resp[:b.want]); e != 0 || n != b.want {
		f.close(c)
		c = nil
	}
	extra := len(b.resp) > b.want
	b.resp, b.want, b.peer = b.resp[:0], 0, nil
	if c != nil {
		c.peer = nil
	}
	if extra {
		f.close(b)
		return
	}
	f.idle = append(f.idle, b)
}

func (f *floor) close(s *sock) {
	if s.peer != nil {
		s.peer.peer = nil
		if s.peer.backend {
			f.close(s.peer) // its answer is for no one now
		}
		s.peer = nil
	}
	if s.backend {
		for i, b := range f.idle {
			if b == s {
				f.idle = append(f.idle[:i], f.idle[i+1:]...)
				break
			}
		}
	}
	delete(f.socks, s.fd)
	syscall.Close(s.fd) // leaves the epoll set with it
}

// Raw: a non-blocking read or write of a socket needs no word with the
// scheduler.
func read(fd int, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func write(fd int, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
