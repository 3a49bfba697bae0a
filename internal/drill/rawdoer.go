package drill

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// RawDoer sends HTTP/1.1 requests to a plain http:// target over TCP
// connections it writes and reads itself: one goroutine per request (the
// caller's), no read and write goroutine per connection and no
// http.Request or http.Response, so that an open-loop load of thousands
// of requests per second costs the generator a fraction of what
// net/http's client does on the same cores as the edge it measures.
//
// It grades as HTTPDoer does (Response): a connection refused or reset,
// a body cut short (Truncated), a deadline passed (TimedOut). Like
// net/http's client, it sends an idempotent request again, once, on a
// new connection when a kept-alive one was closed before any byte of
// the answer came (the server ended an idle connection as the request
// went out); a fresh connection's request is never sent twice.
//
// Safe for concurrent use; Close closes the idle connections.
type RawDoer struct {
	addr   string
	dialer net.Dialer
	idle   chan *rawConn // kept-alive connections not in use
}

// rawConn is one connection and its reader.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
	wb []byte // the request being written
}

// NewRawDoer returns a doer for base (http://host:port) that keeps up to
// conns connections alive, or an error for a base it cannot serve (any
// other scheme, a path).
func NewRawDoer(base string, conns int) (*RawDoer, error) {
	rest, ok := strings.CutPrefix(base, "http://")
	if !ok || rest == "" || strings.ContainsAny(rest, "/?#") {
		return nil, fmt.Errorf("drill: the raw client serves http://host:port targets, not %q", base)
	}
	if _, _, err := net.SplitHostPort(rest); err != nil {
		rest = net.JoinHostPort(rest, "80")
	}
	return &RawDoer{addr: rest, dialer: net.Dialer{Timeout: 5 * time.Second}, idle: make(chan *rawConn, max(conns, 1))}, nil
}

// Close closes the idle connections; those in use close as their
// requests end, if the pool is full.
func (d *RawDoer) Close() {
	for {
		select {
		case rc := <-d.idle:
			rc.c.Close()
		default:
			return
		}
	}
}

// Do implements Doer.
func (d *RawDoer) Do(ctx context.Context, r *Request) Response {
	rc, reused, err := d.conn(ctx, r.Fresh)
	if err != nil {
		return Response{Err: err, TimedOut: isTimeout(err)}
	}
	resp, keep, untouched := d.roundTrip(ctx, rc, r)
	if untouched && reused && idempotent(r) && ctx.Err() == nil {
		// The server closed the kept-alive connection as the request went
		// out: net/http's client sends it again on a new one too.
		rc.c.Close()
		if rc, err = d.dial(ctx); err != nil {
			return Response{Err: err, TimedOut: isTimeout(err)}
		}
		resp, keep, _ = d.roundTrip(ctx, rc, r)
	}
	if !keep || r.Fresh {
		rc.c.Close()
		return resp
	}
	select {
	case d.idle <- rc:
	default:
		rc.c.Close()
	}
	return resp
}

// conn is a kept-alive connection (reused true) or a new one.
func (d *RawDoer) conn(ctx context.Context, fresh bool) (*rawConn, bool, error) {
	if !fresh {
		select {
		case rc := <-d.idle:
			return rc, true, nil
		default:
		}
	}
	rc, err := d.dial(ctx)
	return rc, false, err
}

func (d *RawDoer) dial(ctx context.Context) (*rawConn, error) {
	c, err := d.dialer.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4<<10)}, nil
}

func idempotent(r *Request) bool {
	switch r.Method {
	case "", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// roundTrip writes r on rc and reads its answer. keep: the connection may
// carry another request; untouched: it failed before any byte of an
// answer came (the request may be sent again if idempotent).
func (d *RawDoer) roundTrip(ctx context.Context, rc *rawConn, r *Request) (resp Response, keep, untouched bool) {
	if dl, ok := ctx.Deadline(); ok {
		rc.c.SetDeadline(dl)
	} else {
		rc.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { rc.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	rc.wb = appendRequest(rc.wb[:0], d.addr, r)
	if _, err := rc.c.Write(rc.wb); err != nil {
		return failed(ctx, err), false, true
	}
	head, err := readHead(rc.br, r.Method == "HEAD")
	if err != nil {
		return failed(ctx, err), false, head.none
	}
	resp = Response{Status: head.status, RetryAfter: head.retryAfter, Reject: head.reject, Backend: head.backend}
	n, err := head.discardBody(rc.br)
	if err != nil {
		if isTimeout(err) && ctx.Err() != nil {
			return Response{Err: err, TimedOut: true}, false, false
		}
		return Response{Status: head.status, Truncated: true,
			Err: fmt.Errorf("drill: response truncated after %d of %d bytes: %w", n, head.length, err)}, false, false
	}
	return resp, head.keep, false
}

// failed is the Response of an error before the answer's head was whole.
func failed(ctx context.Context, err error) Response {
	if ctx.Err() != nil && isTimeout(err) {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return Response{Err: err, TimedOut: isTimeout(err)}
}

// appendRequest is r's bytes: its line, Host, its headers, and
// Connection: close for a fresh connection.
func appendRequest(b []byte, addr string, r *Request) []byte {
	method := r.Method
	if method == "" {
		method = "GET"
	}
	path := r.Path
	if path == "" {
		path = "/"
	}
	host := r.Host
	if host == "" {
		host = addr
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	for k, vs := range r.Header {
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if r.Body != nil || (method != "GET" && method != "HEAD") {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.Body)), 10)
		b = append(b, "\r\n"...)
	}
	if r.Fresh {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, r.Body...)
}

// respHead is what readHead took from an answer's head.
type respHead struct {
	status     int
	length     int64 // -1: unknown (chunked, or until the close)
	chunked    bool
	keep       bool // the connection may be reused after the body
	noBody     bool // HEAD, 1xx, 204, 304
	retryAfter bool
	reject     string
	backend    string
	none       bool // not one byte came
}

var errMalformed = errors.New("drill: malformed response head")

// readHead reads an answer's status line and headers, skipping interim
// (1xx but 101) answers.
func readHead(br *bufio.Reader, head bool) (respHead, error) {
	h := respHead{none: true}
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 || br.Buffered() > 0 {
			h.none = false
		}
		if err != nil {
			return h, unexpected(err, h.none)
		}
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
			return h, errMalformed
		}
		code, err := strconv.Atoi(string(line[9:12]))
		if err != nil {
			return h, errMalformed
		}
		h = respHead{status: code, length: -1, keep: line[7] == '1'}
		if err := h.readFields(br); err != nil {
			return h, unexpected(err, false)
		}
		if code >= 100 && code < 200 && code != 101 {
			continue
		}
		h.noBody = head || code < 200 || code == 204 || code == 304
		if !h.noBody && !h.chunked && h.length < 0 {
			h.keep = false // the body ends at the close
		}
		return h, nil
	}
}

// readFields reads header lines up to the blank one.
func (h *respHead) readFields(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return errMalformed
		}
		v = bytes.TrimSpace(v)
		switch {
		case asciiEqualFold(k, "content-length"):
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n < 0 {
				return errMalformed
			}
			h.length = n
		case asciiEqualFold(k, "transfer-encoding"):
			h.chunked = asciiEqualFold(v, "chunked")
		case asciiEqualFold(k, "connection"):
			if asciiEqualFold(v, "close") {
				h.keep = false
			} else if asciiEqualFold(v, "keep-alive") {
				h.keep = true
			}
		case asciiEqualFold(k, "retry-after"):
			h.retryAfter = true
		case asciiEqualFold(k, "levee-reject"):
			h.reject = string(v)
		case asciiEqualFold(k, backendHeader):
			h.backend = string(v)
		}
	}
}

// discardBody reads the body past, up to maxDrain bytes (a longer one
// leaves the connection unusable); n is the bytes read.
func (h *respHead) discardBody(br *bufio.Reader) (int64, error) {
	switch {
	case h.noBody:
		return 0, nil
	case h.chunked:
		return discardChunked(br)
	case h.length >= 0:
		want := min(h.length, maxDrain)
		n, err := br.Discard(int(want))
		if err == nil && want < h.length {
			h.keep = false
		}
		return int64(n), unexpected(err, false)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(br, maxDrain))
	return n, err
}

// discardChunked reads a chunked body and its trailer past.
func discardChunked(br *bufio.Reader) (int64, error) {
	var total int64
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return total, unexpected(err, false)
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || size < 0 {
			return total, errMalformed
		}
		if size == 0 {
			var h respHead
			return total, unexpected(h.readFields(br), false) // the trailer
		}
		n, err := br.Discard(int(size))
		total += int64(n)
		if err != nil {
			return total, unexpected(err, false)
		}
		if _, err := br.Discard(2); err != nil { // CRLF
			return total, unexpected(err, false)
		}
	}
}

// unexpected is io.ErrUnexpectedEOF for an io.EOF once some of the answer
// came: io.EOF only when nothing did.
func unexpected(err error, none bool) error {
	if err == io.EOF && !none {
		return io.ErrUnexpectedEOF
	}
	return err
}

// asciiEqualFold reports whether b is s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

var _ Doer = (*RawDoer)(nil)
