package h1loop

import (
	"bytes"
	"encoding/binary"
	"iter"
	"math/bits"
	"unsafe"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/framing"
)

// MaxFields is the most header fields a Simple head holds; a head with more
// is NotSimple. Browsers send 10 to 20.
const MaxFields = 64

// Field is one header field: its name as sent, and its value without the
// SP and HTAB around it.
type Field struct{ Name, Value []byte }

// Head is one request head parsed from a buffer: views into it, valid until
// the buffer changes. Its contents mean something only after ParseHead
// returned Simple.
type Head struct {
	Method []byte
	Target []byte // the request-target as sent (origin-form, starting with '/')
	Path   []byte // Target up to the first '?'; also the path fasthttp's URI routes on
	Host   []byte // the one Host field's value
	HTTP10 bool   // "HTTP/1.0" (else "HTTP/1.1")
	// Close: the connection ends after this request: "Connection: close",
	// or HTTP/1.0 without "Connection: keep-alive".
	Close bool
	// Length: the head has its one "Content-Length: 0". fasthttp reads
	// that as a length of 0, and no such field as -1 (no body either way).
	Length bool
	Len    int    // bytes of the head, request line to the empty line's CRLF included
	Raw    []byte // the head as sent: the buffer's first Len bytes
	NField int
	// Field holds every header field in order as sent, Host included, in
	// Field[:NField].
	Field [MaxFields]Field
}

// Fields is h's header fields, in order as sent.
func (h *Head) Fields() []Field { return h.Field[:h.NField] }

// All yields h's header fields, name and value, in order as sent: as
// fasthttp's RequestHeader.AllInOrder yields the same head's.
func (h *Head) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for i := range h.NField {
			if f := &h.Field[i]; !yield(f.Name, f.Value) {
				return
			}
		}
	}
}

// Result is what ParseHead made of a buffer.
type Result uint8

const (
	NeedMore  Result = iota // no complete head in b yet, and len(b) < max: read more
	Simple                  // h holds a complete head in the subset
	NotSimple               // complete but outside the subset, malformed, or no head within max bytes: hand everything to the full engine
)

func (r Result) String() string {
	switch r {
	case NeedMore:
		return "NeedMore"
	case Simple:
		return "Simple"
	case NotSimple:
		return "NotSimple"
	}
	return "Result(?)"
}

// ParseHead parses the request head at the start of b (at most max bytes of
// head) into h, in one pass and without allocating. It returns Simple only
// for a head in a strict subset of what fasthttp and framing.Fast accept,
// read by them exactly as h says:
//
//   - the request line is METHOD SP TARGET SP HTTP/1.1 or HTTP/1.0 CRLF,
//     with METHOD one of GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH;
//   - TARGET is origin-form of visible ASCII without '#', and its path is in
//     the normal form fasthttp's URI gives it (no '%', no empty, "." or ".."
//     segment), so that Path is what fasthttp would route on;
//   - every line ends in CRLF; no obs-fold; names are tokens with the colon
//     right after them; values hold only HTAB and visible ASCII and SP;
//   - exactly one Host, valid by framing.ValidHost (HTTP/1.0 too), a name
//     or IPv4 address with an optional port, no IP literal;
//   - no body: no Transfer-Encoding, and Content-Length absent or one "0";
//     no underscore twin of either;
//   - no Expect, Upgrade, HTTP2-Settings or Trailer; at most one Connection,
//     whose value is "close" or "keep-alive" (any case);
//   - at most MaxFields fields.
//
// ParseHead returns NotSimple as soon as the bytes read show that the head
// is outside the subset, even before its end: a client that sent a complete
// request fasthttp would read otherwise (ending lines in a bare LF, say)
// then gets its answer from the full engine, not a wait for bytes that never
// come. It returns NeedMore only while b[:max] holds no CRLFCRLF and
// len(b) < max. Bytes after h.Len are not looked at. h's contents are
// unspecified unless it returns Simple.
func ParseHead(b []byte, max int, h *Head) Result {
	if max < 0 {
		max = 0
	}
	full := len(b) >= max // more bytes would not bring a head within max
	if full {
		b = b[:max]
	}
	r := parse(b, h)
	if r == NeedMore && full {
		return NotSimple
	}
	if r == Simple {
		h.Raw = b[:h.Len]
	}
	return r
}

const (
	http11 = "HTTP/1.1\r\n"
	http10 = "HTTP/1.0\r\n"
)

// parse is ParseHead on b[:max]: NeedMore when b ends before the head does.
func parse(b []byte, h *Head) Result {
	i, r := requestLine(b, h)
	if r != Simple {
		return r
	}
	var s seen
	n := 0
	for {
		if i == len(b) {
			return NeedMore
		}
		if b[i] == '\r' { // the empty line
			if i+1 == len(b) {
				return NeedMore
			}
			if b[i+1] != '\n' {
				return NotSimple
			}
			i += 2
			break
		}
		var f Field
		if i, r = fieldLine(b, i, &f); r != Simple {
			return r
		}
		if n == MaxFields || !s.field(f.Name, f.Value) {
			return NotSimple
		}
		h.Field[n] = f
		n++
	}

	if !simpleHost(s.host) { // none is nil, and invalid
		return NotSimple
	}
	if h.HTTP10 && s.keepAlive && string(s.conn) != "Connection" {
		// fasthttp (names as sent) finds HTTP/1.0's keep-alive under this
		// spelling only, and would close where h says keep-alive.
		return NotSimple
	}
	h.Host = s.host
	h.Close = s.close || h.HTTP10 && !s.keepAlive
	h.Length = s.length
	h.Len = i
	h.NField = n
	return Simple
}

// requestLine reads the request line at the start of b into h's Method,
// Target, Path and HTTP10, and returns the index after its CRLF and Simple,
// or NeedMore or NotSimple.
func requestLine(b []byte, h *Head) (int, Result) {
	i := 0
	for i < len(b) && i < len("OPTIONS") && 'A' <= b[i] && b[i] <= 'Z' {
		i++
	}
	if i == len(b) {
		return 0, NeedMore
	}
	if b[i] != ' ' || !simpleMethod(b[:i]) {
		return 0, NotSimple
	}
	h.Method = b[:i]
	i++

	if i == len(b) {
		return 0, NeedMore
	}
	if b[i] != '/' { // absolute-form, authority-form, "*", or a second SP
		return 0, NotSimple
	}
	t := i
	for i < len(b) && targetByte[b[i]] {
		i++
	}
	if i == len(b) {
		return 0, NeedMore
	}
	if b[i] != ' ' {
		return 0, NotSimple
	}
	h.Target = b[t:i]
	h.Path = h.Target
	if q := bytes.IndexByte(h.Target, '?'); q >= 0 {
		h.Path = h.Target[:q]
	}
	// normalPath also keeps out framing's "//a://b" (a path starting "//").
	if !normalPath(h.Path) {
		return 0, NotSimple
	}
	i++

	switch rest := b[i:]; {
	case len(rest) < len(http11):
		if string(rest) == http11[:len(rest)] || string(rest) == http10[:len(rest)] {
			return 0, NeedMore
		}
		return 0, NotSimple
	case string(rest[:len(http11)]) == http11:
		h.HTTP10 = false
	case string(rest[:len(http10)]) == http10:
		h.HTTP10 = true
	default:
		return 0, NotSimple
	}
	return i + len(http11), Simple
}

// fieldLine reads the field line at b[i:] into f, and returns the index
// after its CRLF and Simple, or NeedMore or NotSimple.
func fieldLine(b []byte, i int, f *Field) (int, Result) {
	start := i
	for i < len(b) && framing.TokenByte(b[i]) {
		i++
	}
	if i == len(b) {
		return 0, NeedMore
	}
	// Also an empty name, a line starting with SP or HTAB (obs-fold),
	// whitespace in a name or before the colon, a bare LF.
	if b[i] != ':' || i == start {
		return 0, NotSimple
	}
	f.Name = b[start:i]
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	v := i
	for i+8 <= len(b) { // eight bytes at a time, to the first not SP or visible
		if m := notVisible(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			if i += bits.TrailingZeros64(m) / 8; b[i] != '\t' {
				break
			}
			i++
			continue
		}
		i += 8
	}
	for i < len(b) && valueByte[b[i]] {
		i++
	}
	if i == len(b) || i+1 == len(b) && b[i] == '\r' {
		return 0, NeedMore
	}
	if b[i] != '\r' || b[i+1] != '\n' {
		return 0, NotSimple
	}
	e := i
	for e > v && (b[e-1] == ' ' || b[e-1] == '\t') {
		e--
	}
	f.Value = b[v:e]
	return i + 2, Simple
}

// simpleMethod reports whether m is one of the methods a Simple head may
// have: those browsers and API clients send. Another token is legal, but a
// rare method is where readers part: CONNECT is a tunnel (refused by
// framing), TRACE reflects the request, and an extension method's body and
// caching rules are its own. The full engine reads them; the list also keeps
// the check to one comparison, in upper case only ("get" is another method).
func simpleMethod(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH":
		return true
	}
	return false
}

// seen is what a head's fields said so far.
type seen struct {
	host             []byte // the Host field's value
	conn             []byte // the Connection field's name as sent
	close, keepAlive bool   // its value
	length           bool   // a Content-Length field
}

// field takes one header field and reports whether the head may still be
// Simple. A field may not frame a body (Transfer-Encoding, Content-Length
// other than "0", or an underscore twin of either, which framing refuses),
// nor ask for an expectation, a protocol switch or trailers: the full engine
// handles those. Host, Connection and Content-Length come once: a second
// Host or Content-Length (even "0" twice) is fasthttp's 400, and the caller,
// holding the field list, would find only the first.
func (s *seen) field(name, value []byte) bool {
	switch len(name) {
	case len("host"):
		if ascii.EqualFold(name, "host") {
			if s.host != nil {
				return false
			}
			s.host = value // a slice of b: not nil, even empty
		}
	case len("connection"):
		if ascii.EqualFold(name, "connection") {
			return s.connection(name, value)
		}
	case len("content-length"): // and len("http2-settings")
		if ascii.EqualFold(name, "content-length") {
			if s.length || string(value) != "0" {
				return false
			}
			s.length = true
			return true
		}
		return !framing.Twin(name, "content-length") && !ascii.EqualFold(name, "http2-settings")
	case len("transfer-encoding"):
		return !ascii.EqualFold(name, "transfer-encoding") && !framing.Twin(name, "transfer-encoding")
	case len("expect"): // and len("cookie")
		if ascii.EqualFold(name, "cookie") {
			return !framing.NamelessCookie(value) // the full engine refuses it
		}
		return !ascii.EqualFold(name, "expect")
	case len("upgrade"): // and len("trailer")
		return !ascii.EqualFold(name, "upgrade") && !ascii.EqualFold(name, "trailer")
	}
	return true
}

// connection takes the Connection field: one, with one option that names
// no other field. Connection may list hop-by-hop fields to drop, so a list
// or another token is the full engine's to read.
func (s *seen) connection(name, value []byte) bool {
	if s.conn != nil {
		return false
	}
	s.conn = name
	switch {
	case ascii.EqualFold(value, "close"):
		s.close = true
	case ascii.EqualFold(value, "keep-alive"):
		s.keepAlive = true
	default:
		return false
	}
	return true
}

// simpleHost reports whether h is a Host value in the subset: valid by
// framing's rules (a name or IP literal, at most a port of digits), and
// not an IP literal, which, rare in a Host, is the full engine's to read.
func simpleHost(h []byte) bool { return framing.ValidHost(h) && h[0] != '[' }

// normalPath reports whether p, a path starting with '/', is one fasthttp's
// URI leaves as it is, so that its Path (which routes the request) is p: no
// '%' to decode, no empty segment ("//") to drop, no "." or ".." segment to
// remove.
func normalPath(p []byte) bool {
	start := 1 // of the segment p[start:j]; p[0] is '/'
	for j := 1; j <= len(p); j++ {
		if j < len(p) && p[j] != '/' {
			if p[j] == '%' {
				return false
			}
			continue
		}
		switch string(p[start:j]) {
		case ".", "..":
			return false
		case "":
			if j < len(p) { // "/" and "/a/" end in an empty segment, and keep it
				return false
			}
		}
		start = j + 1
	}
	return true
}

// notVisible marks, with its top bit, the first byte of x (in memory order,
// little-endian) that is not SP or visible ASCII (0x20..0x7e), and maybe
// later ones: below 0x20, x - 0x20 borrows into its top bit; at 0x7f or
// above, x + 1 carries into it, or it is set. A borrow or a carry crosses
// only into a later byte, and only from a byte that is itself marked, so
// the lowest mark is exact. Zero: all eight are.
func notVisible(x uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	return ((x-0x20*ones)&^x | (x + ones) | x) & tops
}

// targetByte marks the bytes of a Simple request-target: visible ASCII
// (RFC 9112 §3.2 has no others) but '#', which is no part of a target
// (framing refuses it).
var targetByte = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = c != '#'
	}
	return t
}()

// valueByte marks the bytes of a Simple field value: HTAB, SP and visible
// ASCII. fasthttp passes bytes >= 0x80 (obs-text) as well, but a value that
// is not ASCII is rare, and the full engine reads it.
var valueByte = func() (t [256]bool) {
	for c := ' '; c <= 0x7e; c++ {
		t[c] = true
	}
	t['\t'] = true
	return t
}()

// CopyTo makes dst a copy of h whose views are into buf (grown and
// returned), which holds a copy of h.Raw: a head the handler keeps past
// Request, when the loop's buffer is read into again.
func (h *Head) CopyTo(dst *Head, buf []byte) []byte {
	buf = append(buf[:0], h.Raw...)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(h.Raw)))
	view := func(v []byte) []byte {
		if v == nil {
			return nil
		}
		off := int(uintptr(unsafe.Pointer(unsafe.SliceData(v))) - base)
		if off < 0 || off+len(v) > len(buf) {
			return nil // not a view of Raw: never, for a head ParseHead made
		}
		return buf[off : off+len(v) : off+len(v)]
	}
	dst.Method, dst.Target, dst.Path, dst.Host = view(h.Method), view(h.Target), view(h.Path), view(h.Host)
	dst.HTTP10, dst.Close, dst.Length, dst.Len, dst.NField = h.HTTP10, h.Close, h.Length, h.Len, h.NField
	dst.Raw = buf[:len(h.Raw)]
	for i := range h.NField {
		f := &h.Field[i]
		dst.Field[i] = Field{Name: view(f.Name), Value: view(f.Value)}
	}
	return buf
}
