package server

// One framing, or none (issue 11 point 2; the rules are in docs/http.md and
// internal/framing): each HTTP/1.1 case is sent raw through levee to a
// backend that records the bytes it gets, and the test asserts levee's
// answer, whether levee closed the connection, and exactly what reached
// the backend: nothing, or requests in one canonical form. Each group of
// cases names the public research it comes from.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/reply"
)

// framingCase is one request (or a few pipelined ones) and what must come
// of it.
type framingCase struct {
	name string
	raw  string
	// status is levee's first answer, 0 for none; then are the answers to
	// further pipelined requests on the same connection.
	status int
	then   []int
	reason string // the Levee-Error of a refusal
	// closed: levee closes the connection after its answers.
	closed bool
	// halfClose: the client shuts its side after writing (raw ends inside a
	// request); levee then closes too.
	halfClose bool
	// fwds are the requests the backend must see, one per connection, in
	// order; none means nothing reaches it.
	fwds []fwd
}

// fwd is what one forwarded request must look like; zero fields take the
// defaults of a bodiless GET / for framing.test.
type fwd struct {
	method, target, host string
	framing              string // "none" (default), "length", "chunked"
	body                 string
	has                  []string // "Name: value" fields present (name in any case)
	not                  []string // names absent
}

const framingHost = "framing.test"

// rq builds a raw request: the request line, then field lines, each
// ending in CRLF, then the empty line, then body.
func rq(line string, fields []string, body string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	for _, f := range fields {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// post is a POST / to framing.test with extra fields and body.
func post(body string, fields ...string) string {
	return rq("POST / HTTP/1.1", append([]string{"Host: " + framingHost}, fields...), body)
}

// get is a GET / to framing.test with extra fields.
func get(fields ...string) string {
	return rq("GET / HTTP/1.1", append([]string{"Host: " + framingHost}, fields...), "")
}

// refused is a case levee answers with status and reason, then closes,
// forwarding nothing.
func refused(name, raw string, status int, reason string) framingCase {
	return framingCase{name: name, raw: raw, status: status, reason: reason, closed: true}
}

// bad is refused with 400.
func bad(name, raw, reason string) framingCase {
	return refused(name, raw, http.StatusBadRequest, reason)
}

// passed is a case forwarded as f, the connection kept.
func passed(name, raw string, f fwd) framingCase {
	return framingCase{name: name, raw: raw, status: http.StatusOK, fwds: []fwd{f}}
}

const chunkedHello = "5\r\nhello\r\n0\r\n\r\n"

const (
	teChunked = "Transfer-Encoding: chunked"
	bodyBad   = "bad-request-body"
	// smuggledGET is a request hidden behind a body, which must never
	// reach the backend.
	smuggledGET = "GET /smuggled HTTP/1.1\r\nHost: framing.test\r\n\r\n"
)

var (
	// A chunked body within limits.request_buffer is read whole before
	// admission and goes on with its length.
	helloChunked = fwd{method: "POST", framing: "length", body: "hello"}
	helloLength  = fwd{method: "POST", framing: "length", body: "hello"}
)

// teCase is one Transfer-Encoding field line and how levee reads it, alone
// (with a chunked body) and beside Content-Length.
type teCase struct {
	name, line string
	alone      string // "chunked": forwarded as chunked; else the refusal reason
	withCL     string // "length": forwarded by Content-Length; else the refusal reason
}

// teCases are the Transfer-Encoding obfuscations of PortSwigger's HTTP
// Request Smuggler (src/burp/DesyncBox.java: each permutation by its name
// there; from "HTTP Desync Attacks: Request Smuggling Reborn", 2019, and
// Amit Klein's "HTTP Request Smuggling in 2020"), the codings of Go's
// TestParseTransferEncoding (net/http/transfer_test.go) and the
// Transfer-Encoding findings of the HTTP Garden (narfindustries/http-garden
// TROPHIES.md: server bugs 11, 12, 21, 44, 46; transducer bugs 9, 15, 18, 25).
var teCases = []teCase{
	{"vanilla", "Transfer-Encoding: chunked", "chunked", framingBad},
	{"lower case", "transfer-encoding: chunked", "chunked", framingBad},
	{"sarcasm", "TrAnSFer-EnCODinG: cHuNkeD", "chunked", framingBad},
	{"yelling", "TRANSFER-ENCODING: CHUNKED", "chunked", framingBad},
	{"nospace1", "Transfer-Encoding:chunked", "chunked", framingBad},
	{"valueprefix1", "Transfer-Encoding:  chunked", "chunked", framingBad},
	{"tabprefix1", "Transfer-Encoding:\tchunked", "chunked", framingBad},
	{"tabsuffix", "Transfer-Encoding: chunked\t", "chunked", framingBad},
	{"suffix1:9", "Transfer-Encoding: chunked\t ", "chunked", framingBad},
	{"0dsuffix", "Transfer-Encoding: chunked\r", parseBad, parseBad},
	{"space1", "Transfer-Encoding : chunked", parseBad, parseBad},
	{"tabprefix2", "Transfer-Encoding\t:\tchunked", parseBad, parseBad},
	{"spacejoin1", "Transfer Encoding: chunked", headerBad, headerBad},
	{"smashed", "Transfer Encoding:chunked", headerBad, headerBad},
	{"spjunk", "Transfer-Encoding x: chunked", headerBad, headerBad},
	{"underjoin1", "Transfer_Encoding: chunked", framingBad, framingBad},
	{"underjoin, lower case", "transfer_encoding: chunked", framingBad, framingBad},
	{"backslash", "Transfer\\Encoding: chunked", parseBad, parseBad},
	{"nameprefix1", "Foo: bar\r\n Transfer-Encoding: chunked", headerBad, headerBad},
	{"nameprefix2", "Foo: bar\r\n\tTransfer-Encoding: chunked", headerBad, headerBad},
	{"tabwrap", "Transfer-Encoding: \r\n\tchunked", headerBad, headerBad},
	{"linewrapped1", "Transfer-Encoding:\n chunked", headerBad, headerBad},
	{"gareth1", "Transfer-Encoding\n : chunked", parseBad, parseBad},
	{"vertwrap", "Transfer-Encoding: \n\x0bchunked", parseBad, parseBad},
	{"badsetupCR", "Foo: bar\rTransfer-Encoding: chunked", parseBad, parseBad},
	{"badsetupLF", "Foo: bar\nTransfer-Encoding: chunked", headerBad, headerBad},
	{"0dwrap", "Foo: bar\r\n\rTransfer-Encoding: chunked", parseBad, parseBad},
	{"0dspam", "Tra\rnsfer-Encoding: chunked", parseBad, parseBad},
	{"connection", "Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked", "chunked", framingBad},
	{"prefix1:0", "Transfer-Encoding: \x00chunked", parseBad, parseBad},
	{"prefix1:11 (Go's \\x0bchunked)", "Transfer-Encoding: \x0bchunked", parseBad, parseBad},
	{"prefix1:12", "Transfer-Encoding: \x0cchunked", parseBad, parseBad},
	{"prefix1:127", "Transfer-Encoding: \x7fchunked", parseBad, parseBad},
	{"suffix1:0", "Transfer-Encoding: chunked\x00", parseBad, parseBad},
	{"suffix1:11", "Transfer-Encoding: chunked\x0b", parseBad, parseBad},
	{"spaceFF", "Transfer-Encoding:\xffchunked", parseBad, parseBad},
	{"unispace (garden 12)", "Transfer-Encoding: \xa0chunked\xa0", parseBad, parseBad},
	{"accentTE", "Transf\x82r-Encoding: chunked", parseBad, parseBad},
	{"accentCH", "Transfer-Encoding: ch\x96nked", parseBad, parseBad},
	{"commaCow", "Transfer-Encoding: chunked, identity", parseBad, parseBad},
	{"cowComma", "Transfer-Encoding: identity, chunked", parseBad, parseBad},
	{"nested", "Transfer-Encoding: identity, chunked, identity", parseBad, parseBad},
	{"quoted", "Transfer-Encoding: \"chunked\"", parseBad, parseBad},
	{"aposed", "Transfer-Encoding: 'chunked'", parseBad, parseBad},
	{"lazygrep", "Transfer-Encoding: chunk", parseBad, parseBad},
	{"xchunked", "Transfer-Encoding: xchunked", parseBad, parseBad},
	{"chunked with a parameter", "Transfer-Encoding: chunked;q=1", parseBad, parseBad},
	{"dualchunk", "Transfer-Encoding: chunked\r\nTransfer-encoding: identity", parseBad, parseBad},
	{"revdualchunk", "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked", parseBad, parseBad},
	{"chunked twice (garden 11, transducer 25)", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", parseBad, parseBad},
	{"chunked, chunked (Go)", "Transfer-Encoding: chunked, chunked", parseBad, parseBad},
	{",chunked (garden 21, transducers 9, 15, 18)", "Transfer-Encoding: ,chunked", parseBad, parseBad},
	{"unknown coding (garden 44)", "Transfer-Encoding: blegh", parseBad, parseBad},
	{"gzip, chunked", "Transfer-Encoding: gzip, chunked", parseBad, parseBad},
	{"empty (Go)", "Transfer-Encoding:", parseBad, parseBad},
	{"high bytes around (garden 46)", "Transfer-Encoding: \xffchunked\xff", parseBad, parseBad},
	{"identity (fasthttp: no body)", "Transfer-Encoding: identity", framingBad, framingBad},
	{"Identity", "Transfer-Encoding: IDENTITY", framingBad, framingBad},
	// Not Transfer-Encoding at all, for levee or any backend: forwarded as
	// ordinary fields, the body framed by its Content-Length (alone, the
	// chunk bytes are the next request, which is refused).
	{"encode", "Transfer-%45ncoding: chunked", "next-refused", "length"},
	{"contentEnc", "Content-Encoding: chunked", "next-refused", "length"},
}

// Refusal reasons, short.
const (
	parseBad   = "bad-request" // fasthttp could not read it (fastParseError)
	headerBad  = "bad-header"
	framingBad = "bad-framing"
	targetBad  = "bad-target"
	hostBad    = "bad-host"
)

// teFraming expands teCases into framingCases: each line with a chunked
// body, and with Content-Length: 5 before it and the same chunked body.
func teFraming() []framingCase {
	var out []framingCase
	for _, tc := range teCases {
		alone := post(chunkedHello, tc.line)
		switch tc.alone {
		case "chunked":
			out = append(out, passed("TE "+tc.name, alone, helloChunked))
		case "next-refused":
			out = append(out, framingCase{name: "TE " + tc.name, raw: alone, status: 200, then: []int{400},
				closed: true, fwds: []fwd{{method: "POST", framing: "length", has: []string{tc.line}}}})
		default:
			out = append(out, bad("TE "+tc.name, alone, tc.alone))
		}
		withCL := post("hello", "Content-Length: 5", tc.line)
		if tc.withCL == "length" {
			f := helloLength
			f.has = []string{tc.line}
			out = append(out, passed("CL.TE "+tc.name, withCL, f))
		} else {
			// The body is read by neither framing: a smuggled request after
			// it must never be answered (RFC 9112 §6.1: close after).
			out = append(out, bad("CL.TE "+tc.name, withCL+"GET /smuggled HTTP/1.1\r\nHost: framing.test\r\n\r\n", tc.withCL))
		}
	}
	return out
}

// framingCases are the rest, by class.
var framingCases = []framingCase{
	// Content-Length (RFC 9110 §8.6, RFC 9112 §6.3): Go's
	// TestParseContentLength and readrequest_test.go's smuggle_two_contentlen;
	// fasthttp's TestRequestHeaderReadError; the HTTP Garden's server bugs
	// 10, 16, 23, 26, 29, 32, 33, 38, 42 and transducer bugs 1, 5, 11, 21, 22.
	passed("CL", post("hello", "Content-Length: 5"), helloLength),
	passed("CL 0", post("", "Content-Length: 0"), fwd{method: "POST", framing: "length"}),
	passed("CL leading zeros (garden 32)", post("hello", "Content-Length: 005"),
		fwd{method: "POST", framing: "length", body: "hello", has: []string{"Content-Length: 5"}}),
	passed("CL tab before value", post("hello", "Content-Length:\t5"), helloLength),
	passed("CL on GET (transducer 21)", rq("GET / HTTP/1.1", []string{"Host: framing.test", "Content-Length: 10"}, "1234567890"),
		fwd{framing: "length", body: "1234567890"}),
	bad("CL twice, equal", post("hello", "Content-Length: 5", "Content-Length: 5"), parseBad),
	bad("CL twice, first wins elsewhere (garden 23)", post("Z", "Content-Length: 1", "Content-Length: 0"), parseBad),
	bad("CL twice, last wins elsewhere (garden 33, transducer 22)", post("Z", "Content-Length: 0", "Content-Length: 1"), parseBad),
	bad("CL twice, different case (Go smuggle_two_contentlen)", post("abcd", "Content-Length: 3", "content-length: 4"), parseBad),
	bad("CL list", post("hello", "Content-Length: 5, 5"), parseBad),
	bad("CL +1_0 (garden 10)", post("0123456789", "Content-Length: +1_0"), parseBad),
	bad("CL +5 (Go)", post("hello", "Content-Length: +5"), parseBad),
	bad("CL -48 (garden 26)", post("", "Content-Length: -48"), parseBad),
	bad("CL 0x10 (transducer 1)", post("Z", "Content-Length: 0x10"), parseBad),
	bad("CL 1Z (garden 29)", post("Z", "Content-Length: 1Z"), parseBad),
	bad("CL empty (garden 16, 38, transducer 5)", post("", "Content-Length: "), parseBad),
	bad("CL empty, then a value (garden 42, transducer 11)", post("", "Content-Length: ", "Content-Length: 43"), parseBad),
	bad("CL with inner space", post("hello", "Content-Length: 5 5"), parseBad),
	bad("CL over int64 (Go)", post("hello", "Content-Length: 9223372036854775808"), parseBad),
	bad("CL 20 digits", post("hello", "Content-Length: 99999999999999999999"), parseBad),
	bad("CL space before colon (garden 3)", post("hello", "Content-Length : 5"), parseBad),
	bad("CL tab before colon", post("hello", "Content-Length\t: 5"), parseBad),
	bad("CL first field after whitespace (garden 4)", rq("POST / HTTP/1.1", []string{"\tContent-Length: 1", "Host: framing.test"}, "X"), parseBad),
	bad("CL folded (HTTP/1.1 must die: 0.CL)", post("hello", "X: y", " Content-Length: 5"), headerBad),
	bad("CL value on a folded line", post("hello", "Content-Length:", " 5"), headerBad),
	bad("CL underscore twin", post("hello", "Content_Length: 5"), framingBad),
	bad("CL high byte before colon (garden 20)", post("0123456789", "Content-Length\x85: 10"), parseBad),
	bad("CL without colon (garden 28)", post("0123456789", "Content-Length 10"), parseBad),

	// Content-Length and Transfer-Encoding together (RFC 9112 §6.1: a
	// server MAY reject, and MUST close after; §6.3 item 3): PortSwigger's
	// CL.TE and TE.CL (2019); Go's TestServerValidatesHeaders; fasthttp's
	// TestRequestHeaderReadError; the HTTP Garden's transducer bug 23.
	bad("CL.TE smuggled GET", post("0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: framing.test\r\n\r\n",
		"Content-Length: 5", "Transfer-Encoding: chunked"), framingBad),
	bad("TE.CL", post("5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked", "Content-Length: 3"), framingBad),
	bad("TE.CL, CL 0", post("5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked", "Content-Length: 0"), framingBad),
	bad("CL.TE identity", post("hello", "Content-Length: 5", "Transfer-Encoding: identity"), framingBad),
	bad("invalid CL beside TE (Go)", post(chunkedHello, "Content-Length: notdigits", "Transfer-Encoding: chunked"), parseBad),
	bad("TE identity, chunked body after (fasthttp finding)", post(chunkedHello+"GET /smuggled HTTP/1.1\r\nHost: framing.test\r\n\r\n",
		"Transfer-Encoding: identity"), framingBad),
	bad("TE on HTTP/1.0 (RFC 9112 §6.1)", rq("POST / HTTP/1.0", []string{"Host: framing.test", "Transfer-Encoding: chunked"}, chunkedHello), parseBad),
	bad("TE and CL on HTTP/1.0", rq("POST / HTTP/1.0", []string{"Host: framing.test", "Transfer-Encoding: chunked", "Content-Length: 5"}, "hello"), parseBad),

	// Chunked bodies (RFC 9112 §7.1) that levee reads before any backend
	// byte: fasthttp's TestParseChunkSize and TestRequestChunkedWhitespace;
	// the HTTP Garden's transducer bug 17, server bug 39.
	passed("chunked, two chunks", post("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
		fwd{method: "POST", framing: "length", body: "hello world"}),
	passed("chunked, extension (dropped: levee re-chunks)", post("5;ext=1\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), helloChunked),
	passed("chunked, size with leading zeros", post("005\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), helloChunked),
	bad("chunked, whitespace after size (fasthttp read it)", post("5  \r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	passed("chunked, trailer (dropped, RFC 9110 §6.5.1)", post("5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", "Transfer-Encoding: chunked"),
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"X-Sum"}}),
	passed("chunked, trailer looks like a request (garden 39)", post("0\r\nX:POST / HTTP/1.1\r\n\r\n", "Transfer-Encoding: chunked"),
		fwd{method: "POST", framing: "length"}),
	bad("chunked, bare LF after the size (Go TestInvalidChunkedBodies)", post("1\na\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, size 2^64-1 (finding)", post("ffffffffffffffff\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, 16 hex digits", post("0000000000000005\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, 0x size (garden 25, transducer 19)", post("0x5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, -0x0 (transducer 19)", post("-0x0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, whitespace before the size (transducer 24)", post("           0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, empty size (garden 17)", post("\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, 0_2e (garden 22)", post("0_2e\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, \\r then a byte after the size (garden 31)", post("5\r\r;ABCD\r\n34\r\nE\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, CR in an extension (garden 36)", post("41;a=b\r\rXXXXXXXX\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, whitespace before ; (fasthttp)", post("5 ;ext\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, invalid sizes (transducer 2)", post("Z\r\nZZ\r\nZZZ\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, size then junk (transducer 7)", post("1these-bytes-never-get-validated\r\nZ\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, INVALID (garden 47)", post("INVALID!!!\r\nGET / HTTP/1.1\r\nHost: framing.test\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, trailer names Host", post("0\r\nHost: evil.test\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, trailer names Transfer-Encoding", post("0\r\nTransfer-Encoding: chunked\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	{name: "CL, body cut short", raw: post("hel", "Content-Length: 5"), status: 400, reason: parseBad, halfClose: true},

	// Chunked framing and trailers as strict as the header section (issue 24
	// point 6; RFC 9112 §2.2, §7.1, §7.1.1, §7.1.2): fasthttp's decoder read
	// each of these, and ended the body at a bare LF after the last chunk.
	bad("chunked, SP after the size", post("5 \r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, HTAB after the size", post("5\t\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, SP before the size", post(" 5\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, HTAB before the size", post("\t5\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, SP after the last chunk's size", post("5\r\nhello\r\n0 \r\n\r\n", teChunked), bodyBad),
	bad("chunked, HTAB before ;", post("5\t;a\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, bare LF after the size line", post("5\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, bare LF after the data", post("5\r\nhello\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, bare LF after the last chunk", post("5\r\nhello\r\n0\n\r\n", teChunked), bodyBad),
	bad("chunked, bare LF ends the trailer section", post("5\r\nhello\r\n0\r\n\n", teChunked), bodyBad),
	bad("chunked, bare LF ends a trailer line", post("0\r\nX-Sum: 1\n\r\n", teChunked), bodyBad),
	bad("chunked, bare LF ends a trailer line and the section", post("0\r\nX-Sum: 1\n\n", teChunked), bodyBad),
	bad("chunked, bare CR in a trailer line", post("0\r\nX-Sum: 1\rX: 2\r\n\r\n", teChunked), bodyBad),
	bad("chunked, obs-fold trailer", post("0\r\nX-Sum: 1\r\n 2\r\n\r\n", teChunked), bodyBad),
	bad("chunked, obs-fold trailer with a tab", post("0\r\nX-Sum: 1\r\n\t2\r\n\r\n", teChunked), bodyBad),
	bad("chunked, NUL in a trailer value", post("0\r\nX-Sum: 1\x002\r\n\r\n", teChunked), bodyBad),
	bad("chunked, NUL in an extension", post("5;a\x00b\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, DEL in an extension", post("5;a=\x7f\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, VT in an extension", post("5;a=\x0b\r\nhello\r\n0\r\n\r\n", teChunked), bodyBad),
	bad("chunked, NUL in the last chunk's extension", post("5\r\nhello\r\n0;\x00\r\n\r\n", teChunked), bodyBad),
	bad("chunked, a request pipelined behind 0\\n\\n", post("5\r\nhello\r\n0\n\n"+smuggledGET, teChunked), bodyBad),
	bad("chunked, a request pipelined behind 0\\r\\n\\n", post("5\r\nhello\r\n0\r\n\n"+smuggledGET, teChunked), bodyBad),
	bad("chunked, a request pipelined behind a trailer and \\n\\n", post("0\r\nX: y\n\n"+smuggledGET, teChunked), bodyBad),
	{name: "chunked to no app, a request pipelined behind 0\\r\\n\\n (closed unread)",
		raw: rq("POST / HTTP/1.1", []string{"Host: nowhere.test", teChunked}, "0\r\n\n"+smuggledGET), status: http.StatusNotFound, closed: true},
	passed("chunked, extensions on every chunk", post("5;a=1;b=\"x\ty\"\r\nhello\r\n0;c\r\n\r\n", teChunked), helloChunked),
	passed("chunked, trailers (dropped)", post("5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other: a b\r\n\r\n", teChunked),
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"X-Sum", "X-Other"}}),
	{name: "chunked, then a pipelined GET", raw: post(chunkedHello, teChunked) + get(),
		status: 200, then: []int{200}, fwds: []fwd{helloChunked, {}}},
	{name: "chunked with extensions and trailers, then a pipelined GET",
		raw:    post("5;a=b\r\nhello\r\n0;c\r\nX-Sum: 1\r\n\r\n", teChunked) + get(),
		status: 200, then: []int{200}, fwds: []fwd{helloChunked, {}}},
	bad("Trailer announces Content-Length (fasthttp)", post(chunkedHello, "Transfer-Encoding: chunked", "Trailer: Content-Length"), parseBad),
	bad("Trailer announces Host (fasthttp)", post(chunkedHello, "Transfer-Encoding: chunked", "Trailer: Host"), parseBad),
	passed("Trailer announces X-Sum (dropped, hop-by-hop)", post(chunkedHello, "Transfer-Encoding: chunked", "Trailer: X-Sum"),
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"Trailer"}}),
	passed("chunked GET", rq("GET / HTTP/1.1", []string{"Host: framing.test", "Transfer-Encoding: chunked"}, chunkedHello),
		fwd{framing: "length", body: "hello"}),

	// Field lines (RFC 9110 §5.1, §5.5; RFC 9112 §2.2, §5.1, §5.2): Go's
	// TestServerValidatesHeaders and readrequest_test.go's leading space and
	// tab; the HTTP Garden's server bugs 2, 8, 13, 14, 18, 19, 27, 30, 34, 35,
	// 37, 41, 43 and transducer bugs 6, 10, 12, 14, 16, 20; fasthttp's own.
	bad("name with a space (Go; fasthttp forwarded it)", get("A space: foo"), headerBad),
	bad("name with a space, TE", post(chunkedHello, "Transfer Encoding: chunked"), headerBad),
	bad("name with a high byte (Go)", get("foo\xffbar: foo"), parseBad),
	bad("name with a NUL (Go)", get("foo\x00bar: foo"), parseBad),
	bad("name with a non-ASCII start (garden 8)", get("\xefoo: bar"), parseBad),
	bad("name with delimiters (garden 14)", get("X@\"(),/;<=>?[]{}: whatever"), parseBad),
	bad("name with 0x85 (transducer 6)", get("Header\x85: value"), parseBad),
	bad("space before colon (Go)", get("Foo : bar"), parseBad),
	bad("tab before colon (Go)", get("Foo\t: bar"), parseBad),
	bad("empty name (Go, garden 18)", get(": empty key"), parseBad),
	bad("empty name and value (garden 27)", get(":", "I: am chopped off"), parseBad),
	bad("first field after a space (Go issue 22464)", rq("GET / HTTP/1.1", []string{" Host: framing.test"}, ""), parseBad),
	bad("first field after a tab (Go issue 22464)", rq("GET / HTTP/1.1", []string{"\tHost: framing.test"}, ""), parseBad),
	bad("name continued on the next line (garden 37)", post(chunkedHello, "Transfer-", "Encoding: chunked", "Content-Length: 5"), parseBad),
	bad("line without colon, LF inside (transducer 14)", get("Te\nst: test"), parseBad),
	bad("NUL in value (Go)", get("foo: foo\x00foo"), parseBad),
	bad("NUL and CR in value (garden 2)", get("Header: v\x00\ralue"), parseBad),
	bad("NUL at the end of a value (garden 43)", get("Evil: evil\x00"), parseBad),
	bad("NUL inside a value (garden 35)", get("Test: test\x00THESE BYTES GET DROPPED"), parseBad),
	bad("NUL on a line of its own (transducer 20)", get("a:b", "c\x00"), parseBad),
	bad("DEL in value (Go)", get("foo: foo\x7ffoo"), parseBad),
	bad("bare CR in value (garden 34, transducer 10)", get("Header: va\rlue"), parseBad),
	bad("bare CR ends a line (garden 13)", get("Visible: :/\rSmuggled: :)"), parseBad),
	bad("CR then a byte ends the block (garden 30)", "GET / HTTP/1.1\r\nHost: framing.test\r\n\rZGET /evil: HTTP/1.1\r\nHost: a\r\n\r\n", parseBad),
	bad("obs-fold", get("X-Folded: one", " two"), headerBad),
	bad("obs-fold with a tab", get("X-Folded: one", "\ttwo"), headerBad),
	bad("obs-fold in Host (fuzz finding)", rq("GET / HTTP/1.1", []string{"Host: framing.test", " .evil"}, ""), parseBad),
	bad("obs-fold of only whitespace", get("X: y", " "), headerBad),
	bad("bare LF ends a field line", "GET / HTTP/1.1\r\nHost: framing.test\nX: y\r\n\r\n", headerBad),
	bad("bare LF ends the block after a field", "GET / HTTP/1.1\r\nHost: framing.test\r\nUseless:\n\nGET / HTTP/1.1\r\nHost: framing.test\r\n\r\n", headerBad),
	passed("high bytes in a value (Go: obs-text)", get("foo: foo\xfffoo"), fwd{has: []string{"foo: foo\xfffoo"}}),
	passed("0x85 and 0xa0 around a value (garden 41)", get("User: \x85admin\xa0"), fwd{has: []string{"User: \x85admin\xa0"}}),
	passed("space and tab inside a value (Go)", get("foo: foo foo", "bar: bar\tbar"), fwd{has: []string{"foo: foo foo", "bar: bar\tbar"}}),
	passed("empty value", get("X-Empty:"), fwd{has: []string{"X-Empty: "}}),
	passed("empty lines before the request line (RFC 9112 §2.2)", "\r\n\r\n"+get(), fwd{}),

	// Host and the authority (RFC 9110 §7.2, RFC 9112 §3.2, §3.2.2, RFC 3986
	// §3.2.2): Go's TestServerValidatesHostHeader; fasthttp's
	// TestRequestHeaderReadError; the HTTP Garden's transducer bug 12; the
	// findings of issue 11 (Connection: Host, HTTP/1.0 without Host).
	bad("no Host (RFC 9112 §3.2)", rq("GET / HTTP/1.1", nil, ""), parseBad),
	bad("empty Host", rq("GET / HTTP/1.1", []string{"Host:"}, ""), parseBad),
	bad("two Hosts", get("Host: other.test"), parseBad),
	bad("two Hosts, same value", get("host: framing.test"), parseBad),
	bad("HTTP/1.0 without Host (fuzz finding)", rq("GET / HTTP/1.0", nil, ""), hostBad),
	bad("HTTP/1.0, empty Host", rq("GET / HTTP/1.0", []string{"Host:"}, ""), hostBad),
	bad("Host with a control byte (Go)", rq("GET / HTTP/1.1", []string{"Host: \x06"}, ""), parseBad),
	bad("Host 0xff (Go)", rq("GET / HTTP/1.1", []string{"Host: \xff"}, ""), hostBad),
	bad("Host { (Go)", rq("GET / HTTP/1.1", []string{"Host: {"}, ""), parseBad),
	bad("Host } (Go)", rq("GET / HTTP/1.1", []string{"Host: }"}, ""), parseBad),
	bad("Host with NUL (transducer 12)", rq("GET / HTTP/1.1", []string{"Host: framing.test\x00.evil"}, ""), parseBad),
	bad("Host with a quote (fuzz seed)", rq("GET / HTTP/1.1", []string{"Host: we\"ird"}, ""), hostBad),
	bad("Host with userinfo", rq("GET / HTTP/1.1", []string{"Host: user@framing.test"}, ""), hostBad),
	// fasthttp's URI cannot parse these (its server refuses them before
	// framing.Fast sees them); routed, they would route on "/", past the
	// limits of the path they ask for.
	bad("Host with a port not of digits", rq("GET /x HTTP/1.1", []string{"Host: framing.test:x"}, ""), parseBad),
	bad("Host with two colons", rq("GET /x HTTP/1.1", []string{"Host: framing.test:1:2"}, ""), parseBad),
	bad("Host a lone bracket (h1loop fuzz finding)", rq("GET /x HTTP/1.1", []string{"Host: ]"}, ""), parseBad),
	bad("Host with a path", rq("GET / HTTP/1.1", []string{"Host: framing.test/evil"}, ""), parseBad),
	bad("Host with a space", rq("GET / HTTP/1.1", []string{"Host: framing.test evil"}, ""), parseBad),
	bad("Host percent-encoded, ASCII", rq("GET / HTTP/1.1", []string{"Host: fr%61ming.test"}, ""), parseBad),
	bad("Host percent-encoded, UTF-8 (fasthttp's client decodes it)", rq("GET / HTTP/1.1", []string{"Host: x%C3%A9.framing.test"}, ""), hostBad),
	bad("Host with raw UTF-8", rq("GET / HTTP/1.1", []string{"Host: xÃ©.framing.test"}, ""), hostBad),
	passed("Host with a port", rq("GET / HTTP/1.1", []string{"Host: framing.test:80"}, ""), fwd{host: "framing.test:80"}),
	passed("Host in upper case (fasthttp's client writes it lower)", rq("GET / HTTP/1.1", []string{"Host: FRAMING.TEST"}, ""), fwd{}),
	passed("Host with trailing whitespace", rq("GET / HTTP/1.1", []string{"Host: framing.test \t"}, ""), fwd{}),
	passed("Connection: Host (finding: 502)", get("Connection: Host"), fwd{}),
	passed("Connection: host and another", get("Connection: host, x-drop", "X-Drop: 1"), fwd{not: []string{"X-Drop"}}),

	// request-target forms (RFC 9112 §3.2.1–§3.2.4): the absolute-form
	// finding of issue 11; fasthttp's asterisk-form cases; the HTTP Garden's
	// server bugs 7 and 9.
	{name: "absolute-form for another host (finding)", raw: rq("GET http://other.test/x HTTP/1.1", []string{"Host: framing.test"}, ""),
		status: http.StatusNotFound},
	passed("absolute-form: the target's authority wins over Host", rq("GET http://framing.test/x?q=1 HTTP/1.1", []string{"Host: other.test"}, ""),
		fwd{target: "/x?q=1"}),
	passed("absolute-form without Host", rq("GET http://framing.test/x HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{target: "/x"}),
	passed("absolute-form, no path", rq("GET http://framing.test HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{}),
	passed("absolute-form, query and no path", rq("GET http://framing.test?a=b HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{target: "/?a=b"}),
	passed("absolute-form, port", rq("GET http://framing.test:8080/ HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{host: "framing.test:8080"}),
	passed("absolute-form, scheme in upper case", rq("GET HTTPS://framing.test/ HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{}),
	passed("absolute-form OPTIONS, no path (RFC 9112 §3.2.4)", rq("OPTIONS http://framing.test HTTP/1.1", []string{"Host: framing.test"}, ""),
		fwd{method: "OPTIONS", target: "*", framing: "length"}),
	passed("asterisk-form OPTIONS", rq("OPTIONS * HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{method: "OPTIONS", target: "*", framing: "length"}),
	bad("absolute-form, other scheme", rq("GET ftp://framing.test/ HTTP/1.1", []string{"Host: framing.test"}, ""), targetBad),
	bad("absolute-form, userinfo (RFC 9110 §4.2.4)", rq("GET http://user:pw@framing.test/ HTTP/1.1", []string{"Host: framing.test"}, ""), hostBad),
	bad("absolute-form, empty authority", rq("GET http:///x HTTP/1.1", []string{"Host: framing.test"}, ""), hostBad),
	bad("absolute-form, fragment", rq("GET http://framing.test/#f HTTP/1.1", []string{"Host: framing.test"}, ""), targetBad),
	bad("origin-form, fragment", rq("GET /x#f HTTP/1.1", []string{"Host: framing.test"}, ""), targetBad),
	bad("origin-form fasthttp reads as an authority", rq("GET //evil.test://x HTTP/1.1", []string{"Host: framing.test"}, ""), targetBad),
	bad("origin-form fasthttp reads as an empty authority", rq("GET ///x://evil/ HTTP/1.1", []string{"Host: framing.test"}, ""), targetBad),
	passed("origin-form with an empty first segment", rq("GET //x/y HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{target: "//x/y"}),
	passed("origin-form with :// in the query", rq("GET /r?to=http://evil.test/ HTTP/1.1", []string{"Host: framing.test"}, ""),
		fwd{target: "/r?to=http://evil.test/"}),
	bad("asterisk-form GET (fasthttp)", rq("GET * HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("authority-form GET", rq("GET framing.test:80 HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("target ! (garden 7)", rq("GET ! HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("LF between target and version (garden 9)", "GET /\nHTTP/1.1\r\nHost: framing.test\r\n\r\n", parseBad),
	bad("space in target", rq("GET /a b HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("two spaces after the method", rq("GET  / HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	passed("percent-encoded NUL in the target", rq("GET /%00 HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{target: "/%00"}),
	refused("CONNECT (finding: forwarded)", rq("CONNECT framing.test:443 HTTP/1.1", []string{"Host: framing.test:443"}, ""), http.StatusNotImplemented, "connect"),
	refused("CONNECT with tunnel bytes after it", rq("CONNECT framing.test:443 HTTP/1.1", []string{"Host: framing.test:443"}, "\x16\x03\x01GET / HTTP/1.1\r\n\r\n"),
		http.StatusNotImplemented, "connect"),
	bad("connect in lower case is no CONNECT", rq("connect framing.test:443 HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),

	// Versions and the request line (RFC 9110 §2.5, §15.6.6; RFC 9112 §2.3,
	// §3): Go's TestServerValidatesHostHeader (HTTP/0.9, 2.0, 3.0); the HTTP
	// Garden's server bugs 5, 6, 15, 24, 40; the HTTP/2.0 finding of issue 11.
	{name: "HTTP/1.0", raw: rq("GET / HTTP/1.0", []string{"Host: framing.test"}, ""), status: 200, closed: true, fwds: []fwd{{}}},
	passed("HTTP/1.0 keep-alive", rq("GET / HTTP/1.0", []string{"Host: framing.test", "Connection: keep-alive"}, ""), fwd{}),
	refused("HTTP/2.0 (finding: forwarded as 1.1)", rq("GET / HTTP/2.0", []string{"Host: framing.test"}, ""), http.StatusHTTPVersionNotSupported, "http-version"),
	refused("HTTP/3.0 (Go)", rq("GET / HTTP/3.0", []string{"Host: framing.test"}, ""), http.StatusHTTPVersionNotSupported, "http-version"),
	refused("HTTP/0.9 (Go)", rq("GET / HTTP/0.9", []string{"Host: framing.test"}, ""), http.StatusHTTPVersionNotSupported, "http-version"),
	refused("HTTP/1.2", rq("GET / HTTP/1.2", []string{"Host: framing.test"}, ""), http.StatusHTTPVersionNotSupported, "http-version"),
	bad("HTTP/1.32 (garden 5)", rq("GET / HTTP/1.32", []string{"Host: framing.test"}, ""), parseBad),
	bad("HTTP/4294967295.255 (garden 24)", rq("GET / HTTP/4294967295.255", []string{"Host: framing.test"}, ""), parseBad),
	bad("HTTP/\\r\\r1.1 (garden 15)", rq("GET / HTTP/\r\r1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("version in lower case", rq("GET / http/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("space after the version", rq("GET / HTTP/1.1 ", []string{"Host: framing.test"}, ""), parseBad),
	bad("no version", rq("GET /", []string{"Host: framing.test"}, ""), parseBad),
	bad("method of delimiters (garden 6)", rq("G=\":<>(e),[T];?\" /get HTTP/1.1", []string{"Host: framing.test"}, ""), parseBad),
	bad("NUL method, dotted version (garden 40)", "\x00 / HTTP/............0596.7407.\r\nHost: framing.test\r\n\r\n", parseBad),
	bad("HTTP/2 preface on an HTTP/1.1 listener", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", parseBad),
	passed("extension method", rq("PURGE /x HTTP/1.1", []string{"Host: framing.test"}, ""), fwd{method: "PURGE", target: "/x", framing: "length"}),

	// Expect (RFC 9110 §10.1.1): the Expect-based desyncs of PortSwigger's
	// "HTTP/1.1 must die" (2025).
	passed("Expect: 100-continue", post("hello", "Content-Length: 5", "Expect: 100-continue"),
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"Expect"}}),
	passed("Expect: 100-Continue", post("hello", "Content-Length: 5", "Expect: 100-Continue"),
		fwd{method: "POST", framing: "length", body: "hello", not: []string{"Expect"}}),
	passed("Expect: 100-continue without a body", get("Expect: 100-continue"), fwd{not: []string{"Expect"}}),
	passed("Expect empty", get("Expect:"), fwd{not: []string{"Expect"}}),
	refused("Expect: y 100-continue", post("hello", "Content-Length: 5", "Expect: y 100-continue"), http.StatusExpectationFailed, "expectation"),
	refused("Expect: 100-continue, foo", post("hello", "Content-Length: 5", "Expect: 100-continue, foo"), http.StatusExpectationFailed, "expectation"),
	refused("Expect: unknown on HTTP/1.0", rq("GET / HTTP/1.0", []string{"Host: framing.test", "Expect: foo"}, ""), http.StatusExpectationFailed, "expectation"),
	bad("Expect folded", post("hello", "Content-Length: 5", "Expect:", " 100-continue"), headerBad),

	// Hop-by-hop and Connection-named fields (RFC 9110 §7.6.1); the forged
	// forwarding fields levee replaces; the Proxy field of httpoxy
	// (CVE-2016-5385).
	passed("Connection names a field", get("Connection: keep-alive, X-Drop", "X-Drop: 1"), fwd{not: []string{"X-Drop", "Connection"}}),
	passed("Connection names Content-Length", post("hello", "Connection: Content-Length", "Content-Length: 5"), helloLength),
	passed("Connection names X-Forwarded-For", get("Connection: X-Forwarded-For", "X-Forwarded-For: 6.6.6.6"), fwd{}),
	{name: "Connection: close", raw: get("Connection: close"), status: 200, closed: true, fwds: []fwd{{}}},
	passed("hop-by-hop fields", get("Keep-Alive: 5", "Proxy-Connection: keep-alive", "TE: gzip", "Trailer: X-Sum",
		"Upgrade: websocket", "Proxy-Authorization: Basic eA=="),
		fwd{not: []string{"Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Upgrade", "Proxy-Authorization"}}),
	passed("TE: trailers is kept", get("TE: trailers"), fwd{has: []string{"TE: trailers"}}),
	passed("Proxy (httpoxy)", get("Proxy: http://evil.example:3128"), fwd{not: []string{"Proxy"}}),
	passed("proxy in lower case", get("proxy: http://evil.example:3128"), fwd{not: []string{"Proxy"}}),
	passed("forged forwarding fields", get("X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6", "X_Forwarded_For: 6.6.6.6", "X-Real-IP: 6.6.6.6"),
		fwd{not: []string{"X_Forwarded_For", "X-Real-IP"}}),

	// Upgrade (RFC 9110 §7.8): passed on only without a body, which the
	// tunnel would drop or pass on as the new protocol's first bytes; with
	// one, an ordinary request. The backend here answers 200, so no tunnel
	// opens.
	passed("upgrade", rq("GET /chat HTTP/1.1", []string{"Host: framing.test", "Connection: Upgrade", "Upgrade: websocket"}, ""),
		fwd{target: "/chat", has: []string{"Connection: Upgrade", "Upgrade: websocket"}}),
	passed("upgrade with a body", rq("GET /chat HTTP/1.1", []string{"Host: framing.test", "Connection: Upgrade", "Upgrade: websocket", "Content-Length: 5"}, "hello"),
		fwd{target: "/chat", framing: "length", body: "hello", not: []string{"Connection", "Upgrade"}}),
	passed("upgrade with a chunked body", rq("GET /chat HTTP/1.1", []string{"Host: framing.test", "Connection: Upgrade", "Upgrade: websocket", "Transfer-Encoding: chunked"}, chunkedHello),
		fwd{target: "/chat", framing: "length", body: "hello", not: []string{"Connection", "Upgrade"}}),
	passed("h2c upgrade (never passed on)", rq("GET / HTTP/1.1", []string{"Host: framing.test", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQAAP__"}, ""),
		fwd{not: []string{"Connection", "Upgrade", "HTTP2-Settings"}}),

	// Message boundaries on a kept connection: the HTTP Garden's server bugs
	// 45 and 48.
	{name: "two pipelined GETs", raw: get() + get(), status: 200, then: []int{200}, fwds: []fwd{{}, {}}},
	{name: "CL 0, then a pipelined POST (garden 48)", raw: post("", "Content-Length: 0", "Connection: keep-alive") +
		rq("POST / HTTP/1.1", []string{"Host: framing.test", "Content-Length: 5"}, "hello"),
		status: 200, then: []int{200}, fwds: []fwd{{method: "POST", framing: "length"}, helloLength}},
	{name: "close, then garbage (garden 45)", raw: get("Connection: close") + "Invalid\r\n\r\n", status: 200, closed: true, fwds: []fwd{{}}},
	{name: "a request, then garbage", raw: get() + "Invalid\r\n\r\n", status: 200, then: []int{400}, closed: true, fwds: []fwd{{}}},
	{name: "a chunked body, then a NUL (garden crash 3)", raw: post(chunkedHello+"\x00", "Transfer-Encoding: chunked"),
		status: 200, then: []int{400}, halfClose: true, fwds: []fwd{helloChunked}},
}

// preReadCases are malformed bodies levee refuses only once it has begun to
// forward them: the backend gets the head and the first chunks, then a
// connection cut (never a complete request, so no backend acts on one).
// Once bodies up to limits.request_buffer are read whole before admission
// (issue 11 point 1), each is refused with nothing sent.
var preReadCases = []framingCase{
	bad("chunked, bare LF after the data (transducer 13)", post("a\r\n0123456789\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, data not followed by CRLF", post("5\r\nhelloX0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, extra CRLF before the last chunk (transducer 17)", post("5\r\nhello\r\n\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	bad("chunked, trailer names Content-Length", post("5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n", "Transfer-Encoding: chunked"), "bad-request-body"),
	{name: "chunked, cut short", raw: post("5\r\nhel", "Transfer-Encoding: chunked"), status: 400, reason: "bad-request-body", halfClose: true},
	{name: "chunked, bare LF at the end (Go TestInvalidChunkedBodies)", raw: post("1\r\na\r\n0\r\n\n", "Transfer-Encoding: chunked"), status: 400, reason: "bad-request-body", halfClose: true},
}

// TestFramingH2CListenerChunked: on a listener with h2c, an HTTP/1.1
// connection (one that does not open with the HTTP/2 preface), an
// "Upgrade: h2c" among them, is fasthttp's, so its chunked body is read by
// levee's strict decoder; net/http's HTTP/1.1 reader is never reached.
func TestFramingH2CListenerChunked(t *testing.T) {
	addr, be := framingProxy(t, true)
	h2cUpgrade := []string{"Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQAAP__", teChunked}
	for _, c := range []framingCase{
		bad("bare LF after the last chunk", post("5\r\nhello\r\n0\r\n\n"+smuggledGET, teChunked), bodyBad),
		bad("Upgrade: h2c, bare LF after the last chunk", post("5\r\nhello\r\n0\r\n\n"+smuggledGET, h2cUpgrade...), bodyBad),
		bad("Upgrade: h2c, SP after the size", post("5 \r\nhello\r\n0\r\n\r\n", h2cUpgrade...), bodyBad),
		bad("Upgrade: h2c, obs-fold trailer", post("5\r\nhello\r\n0\r\nX: 1\r\n 2\r\n\r\n", h2cUpgrade...), bodyBad),
	} {
		t.Run(c.name, func(t *testing.T) { runFraming(t, addr, be, c) })
	}
}

func TestFramingHTTP1PreRead(t *testing.T) {
	addr, be := framingProxy(t, false)
	for _, c := range preReadCases {
		t.Run(c.name, func(t *testing.T) { runFraming(t, addr, be, c) })
	}
}

// framingProxy is a levee whose one app, framing.test, forwards to a
// recording backend, on a listener that serves HTTP/1.x only, or h2c
// beside it.
func framingProxy(t testing.TB, h2c bool) (addr string, be *wireBackend) {
	t.Helper()
	be = newWireBackend(t)
	cfg := fmt.Sprintf("listen: [{addr: 127.0.0.1:0, h2c: %v}]\n", h2c)
	p := startProxy(t, cfg+"apps:\n  framing:\n    hosts: ["+framingHost+"]\n    backends: ["+be.addr()+"]\n")
	return strings.TrimPrefix(p.URL, "http://"), be
}

func TestFramingHTTP1(t *testing.T) {
	addr, be := framingProxy(t, false)
	cases := append(teFraming(), framingCases...)
	if len(cases) < 100 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runFraming(t, addr, be, c) })
	}
}

// runFraming sends c.raw to levee on a connection of its own and checks
// the answers, the connection and what reached the backend.
func runFraming(t *testing.T, addr string, be *wireBackend, c framingCase) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(guard))
	if _, err := io.WriteString(conn, c.raw); err != nil {
		t.Fatal(err)
	}
	if c.halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	br := bufio.NewReader(conn)
	want := append([]int{c.status}, c.then...)
	if c.status == 0 {
		want = nil
	}
	for i, code := range want {
		resp, err := readFinal(br)
		if err != nil {
			t.Fatalf("answer %d: %v (want %d)", i+1, err, code)
		}
		if resp.StatusCode != code {
			t.Errorf("answer %d: status %d %q, want %d", i+1, resp.StatusCode, resp.Header.Get(reply.Error), code)
		}
		if i == 0 && c.reason != "" && resp.Header.Get(reply.Error) != c.reason {
			t.Errorf("Levee-Error %q, want %q", resp.Header.Get(reply.Error), c.reason)
		}
	}
	if c.closed || c.halfClose || c.status == 0 {
		if resp, err := readFinal(br); err == nil {
			t.Errorf("levee answered once more (%d): the rest of the bytes was read as a request", resp.StatusCode)
		} else if !closedErr(err) {
			t.Errorf("connection not closed after the answer: %v", err)
		}
	}
	checkBackend(t, be.settle(t), c.fwds)
	if !c.closed && !c.halfClose && c.status != 0 {
		// Kept open, and still usable.
		if _, err := io.WriteString(conn, get()); err != nil {
			t.Fatalf("connection closed, want it kept: %v", err)
		}
		if resp, err := readFinal(br); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("request after the case: %v %v, want 200 on the kept connection", resp, err)
		}
		be.settle(t)
	}
}

// readFinal reads the next final (non-1xx) response and its body.
func readFinal(br *bufio.Reader) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 {
			return resp, nil
		}
	}
}

func closedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset")
}

// checkBackend compares what the backend saw with want, one request per
// connection, and applies the rules every forwarded request must meet.
func checkBackend(t *testing.T, conns []*recConn, want []fwd) {
	t.Helper()
	for i, rc := range conns {
		switch {
		case rc.err != nil:
			t.Errorf("backend connection %d: not one valid request: %v\n%q", i+1, rc.err, rc.raw)
		case rc.cut:
			t.Errorf("backend connection %d: cut inside a request\n%q", i+1, rc.raw)
		}
	}
	if len(conns) != len(want) {
		for _, rc := range conns {
			t.Logf("backend saw %q", rc.raw)
		}
		t.Fatalf("backend saw %d requests, want %d", len(conns), len(want))
	}
	for i, rc := range conns {
		if len(rc.reqs) != 1 {
			continue
		}
		got := &rc.reqs[0]
		if err := forwardingRules(got); err != nil {
			t.Errorf("backend request %d: %v\n%s", i+1, err, got)
		}
		if err := want[i].match(got); err != nil {
			t.Errorf("backend request %d: %v\n%s", i+1, err, got)
		}
	}
}

func (f fwd) match(r *wireRequest) error {
	def := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	if m := def(f.method, "GET"); r.method != m {
		return fmt.Errorf("method %q, want %q", r.method, m)
	}
	if tg := def(f.target, "/"); r.target != tg {
		return fmt.Errorf("target %q, want %q", r.target, tg)
	}
	if h := def(f.host, framingHost); len(r.values("Host")) != 1 || r.values("Host")[0] != h {
		return fmt.Errorf("Host %q, want %q", r.values("Host"), h)
	}
	if fr := def(f.framing, "none"); r.framing != fr || string(r.body) != f.body {
		return fmt.Errorf("framing %s body %q, want %s %q", r.framing, r.body, fr, f.body)
	}
	for _, h := range f.has {
		name, value, _ := strings.Cut(h, ": ")
		if vv := r.values(name); len(vv) != 1 || vv[0] != strings.Trim(value, " \t") {
			return fmt.Errorf("%s %q, want %q", name, vv, value)
		}
	}
	for _, name := range f.not {
		if vv := r.values(name); len(vv) > 0 {
			return fmt.Errorf("%s %q forwarded", name, vv)
		}
	}
	return nil
}

// forwardingRules are what every request levee forwards must meet, beside
// parsing strictly (parseWire): one Host, which X-Forwarded-Host repeats;
// levee's own forwarding fields, once each; no hop-by-hop field but an
// upgrade's and TE: trailers; no Expect, no Proxy.
func forwardingRules(r *wireRequest) error {
	hosts := r.values("Host")
	if len(hosts) != 1 || hosts[0] == "" {
		return fmt.Errorf("Host %q", hosts)
	}
	for _, name := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "Forwarded"} {
		if n := len(r.values(name)); n != 1 {
			return fmt.Errorf("%d %s fields", n, name)
		}
	}
	// fasthttp's client writes Host in lower case; X-Forwarded-Host keeps
	// the client's.
	if xfh := r.values("X-Forwarded-Host"); len(xfh) != 1 || !strings.EqualFold(xfh[0], hosts[0]) {
		return fmt.Errorf("X-Forwarded-Host %q, Host %q", xfh, hosts[0])
	}
	upgrade := r.values("Upgrade")
	for _, f := range r.fields {
		switch strings.ToLower(f.name) {
		case "connection":
			if len(upgrade) != 1 || f.value != "Upgrade" {
				return fmt.Errorf("Connection %q forwarded", f.value)
			}
		case "upgrade":
			if len(r.values("Connection")) != 1 {
				return fmt.Errorf("Upgrade %q forwarded without Connection", f.value)
			}
		case "te":
			if f.value != "trailers" {
				return fmt.Errorf("TE %q forwarded", f.value)
			}
		case "keep-alive", "proxy-connection", "trailer", "proxy-authorization", "proxy-authenticate", "expect", "proxy":
			return fmt.Errorf("%s %q forwarded", f.name, f.value)
		}
	}
	return nil
}
