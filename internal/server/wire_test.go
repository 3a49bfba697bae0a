package server

// The backend side of the framing tests: a recording backend that keeps the
// raw bytes of every connection levee opens to it, and a strict HTTP/1.1
// request parser that reads them with no leniency at all (CRLF only, no
// obs-fold, token names, no control bytes, exactly one framing), so any
// forwarded request a stricter or a laxer parser could read differently
// fails the test.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// wireRequest is one request as the recording backend read it.
type wireRequest struct {
	method, target, proto string
	fields                []wireField
	framing               string // "none", "length" or "chunked"
	body                  []byte
	trailers              []wireField
}

type wireField struct{ name, value string }

// values returns the values of the fields called name, in any case.
func (r *wireRequest) values(name string) []string {
	var out []string
	for _, f := range r.fields {
		if strings.EqualFold(f.name, name) {
			out = append(out, f.value)
		}
	}
	return out
}

func (r *wireRequest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s [%s]", r.method, r.target, r.proto, r.framing)
	for _, f := range r.fields {
		fmt.Fprintf(&b, " %q", f.name+": "+f.value)
	}
	fmt.Fprintf(&b, " body %q", r.body)
	return b.String()
}

// errIncomplete: the bytes end inside a request.
var errIncomplete = errors.New("incomplete request")

// parseWire reads one request from the start of b and returns it with the
// number of bytes it took; errIncomplete when b ends inside it; any other
// error for bytes that are not a valid HTTP/1.1 request as levee must send
// one (RFC 9112 read strictly).
func parseWire(b []byte) (wireRequest, int, error) { return parseStrict(b, false) }

// parseClient reads a request as a client may send it, just as strictly
// but for what a client may do and levee not: HTTP/1.0, chunk extensions,
// and what docs/http.md leaves as it is (bare LFs before and at the end of
// a request line, whitespace after a chunk size). Whatever levee forwards must read the
// same this way: it is the parser a proxy in front of levee could be.
func parseClient(b []byte) (wireRequest, int, error) { return parseStrict(b, true) }

func parseStrict(b []byte, client bool) (wireRequest, int, error) {
	skip := 0
	for client && skip < len(b) {
		// RFC 9112 §2.2: empty lines before a request are skipped; fasthttp
		// skips bare LFs there too, which levee cannot see.
		if b[skip] == '\n' {
			skip++
		} else if len(b) >= skip+2 && b[skip] == '\r' && b[skip+1] == '\n' {
			skip += 2
		} else {
			break
		}
	}
	r, p, err := parseWireHead(b[skip:], client)
	if err != nil {
		return r, 0, err
	}
	n, err := r.readBody(b[skip+p:], client)
	if err != nil {
		return r, 0, err
	}
	return r, skip + p + n, nil
}

// parseWireHead reads the request line and the header section, as
// parseStrict does, and the framing they declare; not the body.
func parseWireHead(b []byte, client bool) (wireRequest, int, error) {
	var r wireRequest
	p := 0
	line, n, err := wireLine(b[p:])
	if client && err != nil && !errors.Is(err, errIncomplete) {
		if i := bytes.IndexByte(b, '\n'); i > 0 && b[i-1] != '\r' && bytes.IndexByte(b[:i], '\r') < 0 {
			line, n, err = b[:i], i+1, nil
		}
	}
	if err != nil {
		return r, 0, err
	}
	p += n
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 {
		return r, 0, fmt.Errorf("request line %q: not three parts", line)
	}
	r.method, r.target, r.proto = parts[0], parts[1], parts[2]
	if !wireToken(r.method) {
		return r, 0, fmt.Errorf("method %q is not a token", r.method)
	}
	if r.target == "" || strings.ContainsFunc(r.target, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return r, 0, fmt.Errorf("request-target %q", r.target)
	}
	if r.proto != "HTTP/1.1" && !(client && r.proto == "HTTP/1.0") {
		return r, 0, fmt.Errorf("version %q, want HTTP/1.1", r.proto)
	}
	r.fields, n, err = wireFields(b[p:])
	if err != nil {
		return r, 0, err
	}
	p += n
	te, cl := r.values("Transfer-Encoding"), r.values("Content-Length")
	switch {
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") || len(cl) > 0 {
			return r, 0, fmt.Errorf("framing: Transfer-Encoding %q, Content-Length %q", te, cl)
		}
		r.framing = "chunked"
	case len(cl) > 0:
		if len(cl) != 1 || !wireDigits(cl[0]) || len(cl[0]) > 18 {
			return r, 0, fmt.Errorf("framing: Content-Length %q", cl)
		}
		r.framing = "length"
	default:
		r.framing = "none"
	}
	return r, p, nil
}

// readBody reads the body r's head declares from the start of b.
func (r *wireRequest) readBody(b []byte, client bool) (int, error) {
	switch r.framing {
	case "chunked":
		return r.readChunked(b, client)
	case "length":
		size, _ := strconv.Atoi(r.values("Content-Length")[0])
		if len(b) < size {
			return 0, errIncomplete
		}
		r.body = append([]byte(nil), b[:size]...)
		return size, nil
	}
	return 0, nil
}

// readChunked reads a chunked body strictly: hex sizes without extensions
// or whitespace (levee re-chunks, so it writes none), CRLF after each
// chunk, and a trailer section.
func (r *wireRequest) readChunked(b []byte, client bool) (int, error) {
	p := 0
	for {
		line, n, err := wireLine(b[p:])
		if err != nil {
			return 0, err
		}
		p += n
		if client {
			// chunk-ext (RFC 9112 §7.1.1), read loosely: what follows ';' is
			// not framing. Trailing whitespace as fasthttp takes it.
			if i := bytes.IndexByte(line, ';'); i >= 0 {
				if bytes.ContainsFunc(line[i:], func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
					return 0, fmt.Errorf("chunk extension %q", line)
				}
				line = line[:i]
			} else {
				line = bytes.TrimRight(line, " \t")
			}
			line = bytes.TrimLeft(line, "0")
			if len(line) == 0 {
				line = []byte("0")
			}
		}
		if len(line) == 0 || len(line) > 16 || strings.Trim(string(line), "0123456789abcdefABCDEF") != "" {
			return 0, fmt.Errorf("chunk size %q", line)
		}
		size, err := strconv.ParseUint(string(line), 16, 63)
		if err != nil {
			return 0, fmt.Errorf("chunk size %q: %v", line, err)
		}
		if size == 0 {
			r.trailers, n, err = wireFields(b[p:])
			if err != nil {
				return 0, err
			}
			return p + n, nil
		}
		if uint64(len(b)-p) < size+2 {
			return 0, errIncomplete
		}
		r.body = append(r.body, b[p:p+int(size)]...)
		p += int(size)
		if b[p] != '\r' || b[p+1] != '\n' {
			return 0, fmt.Errorf("chunk of %d not followed by CRLF: %q", size, b[p:p+2])
		}
		p += 2
	}
}

// wireLine returns the line at the start of b without its CRLF, and the
// bytes it took. A bare CR or LF is an error.
func wireLine(b []byte) ([]byte, int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if j := bytes.IndexByte(b, '\r'); j >= 0 && j < len(b)-1 {
			return nil, 0, fmt.Errorf("bare CR in %q", b)
		}
		return nil, 0, errIncomplete
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, 0, fmt.Errorf("bare LF in %q", b[:i+1])
	}
	line := b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, 0, fmt.Errorf("bare CR in %q", line)
	}
	return line, i + 1, nil
}

// wireFields reads field lines up to and including the empty line.
func wireFields(b []byte) ([]wireField, int, error) {
	var out []wireField
	p := 0
	for {
		line, n, err := wireLine(b[p:])
		if err != nil {
			return nil, 0, err
		}
		p += n
		if len(line) == 0 {
			return out, p, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, 0, fmt.Errorf("obs-fold: %q", line)
		}
		name, value, ok := strings.Cut(string(line), ":")
		if !ok || !wireToken(name) {
			return nil, 0, fmt.Errorf("field name in %q", line)
		}
		value = strings.Trim(value, " \t")
		if strings.ContainsFunc(value, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
			return nil, 0, fmt.Errorf("control byte in the value of %q", line)
		}
		out = append(out, wireField{name, value})
	}
}

func wireToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func wireDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// wireBackend is a backend that records the raw bytes of every connection
// and answers each complete request with a fixed 200 and
// "Connection: close", so every request levee forwards comes on a
// connection of its own. Bytes that do not parse (parseWire) are answered
// with 400 and kept as the connection's violation.
type wireBackend struct {
	ln     net.Listener
	marker chan struct{}
	mu     sync.Mutex
	conns  []*recConn
	open   []chan struct{} // one per accepted connection, closed when served
}

// recConn is what the backend saw on one connection.
type recConn struct {
	raw  []byte
	reqs []wireRequest
	// err is a violation: bytes that are not a request levee should send.
	err error
	// cut is set when the connection closed inside a request; reqs then
	// holds its head, if the head was whole.
	cut    bool
	marker bool // settle's own connection
}

// recordingMarker starts the connection settle makes: no request starts
// with a NUL.
const recordingMarker = "\x00settle\n"

const recordedResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

func newWireBackend(t testing.TB) *wireBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &wireBackend{ln: ln, marker: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Kept in accept order: levee opens a connection per request,
			// and they may finish in another order.
			served, rc := make(chan struct{}), &recConn{}
			r.mu.Lock()
			r.open = append(r.open, served)
			r.conns = append(r.conns, rc)
			r.mu.Unlock()
			go func() {
				defer close(served)
				r.serve(c, rc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		r.mu.Lock()
		open := r.open
		r.mu.Unlock()
		for _, ch := range open {
			<-ch
		}
	})
	return r
}

func (r *wireBackend) addr() string { return r.ln.Addr().String() }

func (r *wireBackend) serve(c net.Conn, rc *recConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(guard))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		rc.raw = append(rc.raw, buf[:n]...)
		if len(rc.raw) >= len(recordingMarker) && string(rc.raw[:len(recordingMarker)]) == recordingMarker {
			rc.marker = true
			r.marker <- struct{}{}
			return
		}
		if req, used, perr := parseWire(rc.raw); perr == nil {
			rc.reqs = append(rc.reqs, req)
			c.Write([]byte(recordedResponse))
			// Read on until levee closes: any byte it sent past the request
			// would have been read as the next one.
			c.(*net.TCPConn).CloseWrite()
			rest, _ := io.ReadAll(c)
			rc.raw = append(rc.raw, rest...)
			if len(rc.raw) > used {
				rc.err = fmt.Errorf("%d bytes after the request", len(rc.raw)-used)
			}
			return
		} else if !errors.Is(perr, errIncomplete) {
			rc.err = perr
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			return
		}
		if err != nil {
			if len(rc.raw) > 0 {
				rc.cut = true
				// The head must still be one levee should send.
				if head, _, herr := parseWireHead(rc.raw, false); herr == nil {
					rc.reqs = append(rc.reqs, head)
				} else if !errors.Is(herr, errIncomplete) {
					rc.err = herr
				}
			}
			return
		}
	}
}

// settle waits until the backend has accepted every connection levee
// opened so far (its marker connection is accepted after them) and has
// finished reading each, then returns what they carried and forgets them.
func (r *wireBackend) settle(t testing.TB) []*recConn {
	t.Helper()
	c, err := net.Dial("tcp", r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, recordingMarker); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(guard)
	defer timer.Stop()
	select {
	case <-r.marker:
	case <-timer.C:
		t.Fatalf("recording backend: marker connection not served within %v", guard)
	}
	r.mu.Lock()
	open, all := r.open, r.conns
	r.open, r.conns = nil, nil
	r.mu.Unlock()
	for _, served := range open {
		select {
		case <-served:
		case <-timer.C:
			t.Fatalf("recording backend: a connection from levee still open after %v", guard)
		}
	}
	var out []*recConn
	for _, rc := range all {
		if !rc.marker && len(rc.raw) > 0 {
			out = append(out, rc)
		}
	}
	return out
}
