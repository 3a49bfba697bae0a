package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// conn is one keep-alive HTTP/1.1 connection owned by one worker: a minimal
// client (GET, no pipelining) that is much cheaper per request than
// net/http.Client, so one core can offer more load.
type conn struct {
	addr   string
	req    []byte
	dials  *atomic.Uint64
	c      net.Conn
	br     *bufio.Reader
	reused bool // a response has been read on c before
}

func newConn(addr string, req []byte, dials *atomic.Uint64) *conn {
	return &conn{addr: addr, req: req, dials: dials}
}

var errBadResponse = errors.New("malformed response")

// Do sends the request and reads the whole response before deadline. A
// request that fails on a reused keep-alive connection before any response
// byte arrived (the server closed it while idle) is retried once on a fresh
// connection, as browsers and net/http do for idempotent requests.
func (c *conn) Do(deadline time.Time) (status int, timedOut bool, err error) {
	for attempt := 0; ; attempt++ {
		if c.c == nil {
			if derr := c.dial(deadline); derr != nil {
				return 0, isTimeout(derr), derr
			}
		}
		_ = c.c.SetDeadline(deadline)
		var got bool
		var keep bool
		if _, err = c.c.Write(c.req); err == nil {
			status, keep, got, err = readResponse(c.br)
		}
		if err == nil {
			c.reused = true
			if !keep {
				c.close(false)
			}
			return status, false, nil
		}
		stale := c.reused && !got && !isTimeout(err)
		// The connection is in an unknown state: abort it (RST, no TIME_WAIT).
		c.close(true)
		if stale && attempt == 0 && time.Now().Before(deadline) {
			continue
		}
		return 0, isTimeout(err), err
	}
}

// dial opens the connection.
func (c *conn) dial(deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	nc, err := d.Dial("tcp", c.addr)
	c.dials.Add(1)
	if err != nil {
		return err
	}
	c.c = nc
	if c.br == nil {
		c.br = bufio.NewReaderSize(nc, 16<<10)
	} else {
		c.br.Reset(nc)
	}
	c.reused = false
	return nil
}

func (c *conn) close(abort bool) {
	if c.c == nil {
		return
	}
	if tc, ok := c.c.(*net.TCPConn); ok && abort {
		_ = tc.SetLinger(0)
	}
	_ = c.c.Close()
	c.c = nil
}

// readResponse reads one HTTP/1.x response (status line, headers, body framed
// by Content-Length, chunked encoding or connection close) and discards the
// body. keep reports whether the connection may carry another request; got
// whether any byte of the response arrived.
func readResponse(br *bufio.Reader) (status int, keep, got bool, err error) {
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			got = true
		}
		if err != nil {
			return 0, false, got, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return 0, false, got, errBadResponse
		}
		http10 := line[7] == '0'
		status, err = strconv.Atoi(string(line[9:12]))
		if err != nil || status < 100 || status > 599 {
			return 0, false, got, errBadResponse
		}
		keep = !http10
		contentLength := int64(-1)
		chunked := false
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				if errors.Is(err, bufio.ErrBufferFull) {
					err = errBadResponse
				}
				return 0, false, got, err
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			colon := bytes.IndexByte(h, ':')
			if colon <= 0 {
				return 0, false, got, errBadResponse
			}
			name, val := h[:colon], bytes.TrimSpace(h[colon+1:])
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, perr := strconv.ParseInt(string(val), 10, 64)
				if perr != nil || n < 0 {
					return 0, false, got, errBadResponse
				}
				contentLength = n
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				chunked = bytes.Contains(bytes.ToLower(val), []byte("chunked"))
			case bytes.EqualFold(name, []byte("Connection")):
				lv := bytes.ToLower(val)
				if bytes.Contains(lv, []byte("close")) {
					keep = false
				} else if bytes.Contains(lv, []byte("keep-alive")) {
					keep = true
				}
			}
		}
		if status >= 100 && status < 200 && status != 101 {
			continue // interim response; the real one follows
		}
		switch {
		case status == 204 || status == 304:
		case chunked:
			err = discardChunked(br)
		case contentLength >= 0:
			_, err = br.Discard(int(contentLength))
		default:
			_, err = io.Copy(io.Discard, br)
			keep = false
		}
		if err != nil {
			return 0, false, got, err
		}
		return status, keep, got, nil
	}
}

func discardChunked(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return errBadResponse
		}
		if n == 0 {
			for { // trailers, then the final empty line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n)); err != nil {
			return err
		}
		if _, err := br.ReadSlice('\n'); err != nil {
			return err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// Error kinds, a fixed set so the summary stays bounded.
const (
	errRefused = iota
	errReset
	errEOF
	errMalformed
	errAddr // EADDRNOTAVAIL: out of ephemeral ports
	errOther
	errKindCount
)

var errKindNames = [errKindCount]string{"refused", "reset", "eof", "malformed", "addr_not_avail", "other"}

func classify(err error) int {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return errReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errEOF
	case errors.Is(err, errBadResponse):
		return errMalformed
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return errAddr
	}
	return errOther
}

func buildRequest(path, host string) []byte {
	return fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: levee-loadgen\r\nAccept: */*\r\n\r\n", path, host)
}
