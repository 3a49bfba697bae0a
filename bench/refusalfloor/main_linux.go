// Command refusalfloor is the floor bench/refusal.sh measures levee's
// refusals against: one goroutine on one epoll loop that answers every
// HTTP/1.1 request with 429, none of levee's steps and no goroutine or
// buffer per connection. It is what a Go server costs a refusal when its
// idle connections hold nothing and a readable one is read once (the
// level-triggered loop needs no read that ends in EAGAIN): the shape an
// event-loop front for levee would take, beside fasthttp's goroutine per
// connection (bench/bareproxy -refuse) and nginx.
//
// It is a measuring stick, not a server: requests without a body only,
// answers written whole or not at all, no timeouts.
package main

import (
	"bytes"
	"flag"
	"log"
	"net/netip"
	"syscall"
	"unsafe"
)

// refusal is levee's answer to a request over its rate, but for the
// Date and the RateLimit fields: about the same bytes to write.
var refusal = []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 22\r\nLevee-Reject: rate\r\nX-Content-Type-Options: nosniff\r\nRetry-After: 1\r\n\r\n" +
	"levee: rejected: rate\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:18085", "address to serve on (IPv4)")
	flag.Parse()
	ap, err := netip.ParseAddrPort(*listen)
	if err != nil || !ap.Addr().Is4() {
		log.Fatalf("refusalfloor: -listen %q: want an IPv4 address and port", *listen)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	must(syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1))
	must(syscall.Bind(lfd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}))
	must(syscall.Listen(lfd, 4096))
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		log.Fatal(err)
	}
	must(syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}))
	events := make([]syscall.EpollEvent, 256)
	in := make([]byte, 64<<10) // one buffer for every connection: read, answered, forgotten
	out := make([]byte, 0, 64<<10)
	end := []byte("\r\n\r\n")
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
				for {
					c, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
					if err != nil {
						break // EAGAIN: accepted all
					}
					syscall.SetsockoptInt(c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
					if syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, c, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(c)}) != nil {
						syscall.Close(c)
					}
				}
				continue
			}
			// Raw: a non-blocking read or write of a socket needs no word
			// with the scheduler.
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&in[0])), uintptr(len(in)))
			if e == syscall.EAGAIN {
				continue
			}
			if e != 0 || m == 0 {
				syscall.Close(fd) // leaves the epoll set with it
				continue
			}
			out = out[:0]
			for b := in[:m]; ; {
				i := bytes.Index(b, end)
				if i < 0 {
					break
				}
				out = append(out, refusal...)
				b = b[i+len(end):]
			}
			if len(out) > 0 {
				syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&out[0])), uintptr(len(out)))
			}
		}
	}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
