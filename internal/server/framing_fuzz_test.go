package server

// Fuzzers of the request path (issue 11 point 4): raw bytes in, through a
// real levee over loopback, and every request the recording backend gets
// checked against the framing rules and against what the client sent. The
// seeds are the framing tables' cases; testdata/fuzz/<Fuzz…> keeps the
// corpus and any failure go test writes.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/chunked"
	"github.com/leveeproxy/levee/internal/framing"
)

// sentRequest is one request as the client framed it, read the way
// levee's fasthttp server reads it and rewritten by the framing rules.
type sentRequest struct {
	method, target, host string
	body                 []byte
	bodyKnown            bool // the whole body was read
}

// sentRequests models what levee may forward of raw: each request
// fasthttp reads from it that the framing rules let through, up to the
// first it refuses or after which it closes. Levee forwards a subsequence
// of these (others are refused for a host no app claims, or a limit).
func sentRequests(raw []byte) []sentRequest {
	var out []sentRequest
	// The server reads heads up to max_header_bytes (64 KiB), more than
	// any fuzzed input: a 4 KiB reader would refuse heads levee forwards.
	br := bufio.NewReaderSize(bytes.NewReader(raw), len(raw)+1)
	for {
		var req fasthttp.Request
		req.Header.DisableNormalizing()
		err := req.Header.Read(br)
		if err != nil {
			return out
		}
		if framing.Fast(&req) != nil {
			return out
		}
		s := sentRequest{method: string(req.Header.Method()), target: string(req.Header.RequestURI()), host: string(req.Header.Host())}
		var berr error
		switch n := req.Header.ContentLength(); {
		case n == -1: // chunked: levee's decoder, not fasthttp's
			s.body, berr = io.ReadAll(chunkedBody{br, &chunked.Reader{RefuseTrailer: framing.RefusedTrailer}})
			s.bodyKnown = berr == nil
		case n > 0:
			// Bounded by the input: fasthttp allocates a declared length
			// up front (levee's server streams instead).
			if berr = req.ContinueReadBody(br, len(raw)); berr == nil {
				s.body, s.bodyKnown = append([]byte(nil), req.Body()...), true
			}
		default:
			s.bodyKnown = true
		}
		out = append(out, s)
		if berr != nil || req.Header.ConnectionClose() {
			return out
		}
	}
}

// chunkedBody reads a chunked body from br.
type chunkedBody struct {
	br  *bufio.Reader
	dec *chunked.Reader
}

func (b chunkedBody) Read(p []byte) (int, error) { return b.dec.Read(b.br, p) }

// strictRequests reads raw as parseClient does, request after request,
// up to the first it cannot read: what a strict parser in front of levee
// would take the client to have sent. Absolute-form is turned into origin
// form and Host, as levee does.
func strictRequests(raw []byte) []sentRequest {
	var out []sentRequest
	for len(raw) > 0 {
		r, n, err := parseClient(raw)
		if err != nil {
			return out
		}
		raw = raw[n:]
		s := sentRequest{method: r.method, target: r.target, body: r.body, bodyKnown: true}
		if hosts := r.values("Host"); len(hosts) == 1 {
			s.host = hosts[0]
		}
		if i := strings.Index(r.target, "://"); i > 0 && r.target[0] != '/' {
			rest := r.target[i+3:]
			end := strings.IndexAny(rest, "/?")
			if end < 0 {
				end = len(rest)
			}
			s.host, s.target = rest[:end], rest[end:]
			switch {
			case s.target == "" && r.method == "OPTIONS":
				s.target = "*"
			case s.target == "" || s.target[0] == '?':
				s.target = "/" + s.target
			}
		}
		out = append(out, s)
	}
	return out
}

// sameTarget compares request-targets as fasthttp's client writes them
// (an empty query is dropped).
func sameTarget(a, b string) bool {
	return strings.TrimSuffix(a, "?") == strings.TrimSuffix(b, "?")
}

func FuzzFramingHTTP1(f *testing.F) {
	for _, c := range append(append(teFraming(), framingCases...), preReadCases...) {
		f.Add([]byte(c.raw))
	}
	// A head over bufio's default 4 KiB, which the server reads whole.
	f.Add([]byte("GET / HTTP/1.1\r\nHost: " + framingHost + "\r\nX-Pad: " + strings.Repeat("p", 5000) + "\r\n\r\n"))
	addr, be := framingProxy(f, false)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 8<<10 {
			return // fasthttp's own limits are not what this explores
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(guard))
		conn.Write(raw)
		conn.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, conn); err != nil && !closedErr(err) {
			t.Fatalf("reading levee's answers: %v", err)
		}
		checkSent(t, be.settle(t), sentRequests(raw), strictRequests(raw))
	})
}

// checkSent checks what the backend got: requests that parse strictly and
// meet forwardingRules, each one the client sent as one request, in the
// order sent, with its body; and each read the same by a strict parser
// (strict), so that no proxy in front of levee could have framed the
// client's bytes otherwise.
func checkSent(t *testing.T, conns []*recConn, sent, strict []sentRequest) {
	t.Helper()
	next := 0
	for i, rc := range conns {
		if rc.err != nil {
			t.Fatalf("backend connection %d: %v\n%q", i+1, rc.err, rc.raw)
		}
		if len(rc.reqs) == 0 {
			// Cut inside the head: a body error cannot do that.
			t.Fatalf("backend connection %d: cut before the end of the head\n%q", i+1, rc.raw)
		}
		got := &rc.reqs[0]
		if err := forwardingRules(got); err != nil {
			t.Fatalf("backend request %d: %v\n%s", i+1, err, got)
		}
		// The routed name, in any case, with any port, and as a fully
		// qualified name (a trailing dot: the same name, which levee
		// routes as the catalog keys it, and passes on as sent).
		if h := got.values("Host")[0]; !strings.EqualFold(strings.TrimSuffix(hostOnly(h), "."), framingHost) {
			t.Fatalf("backend request %d: Host %q, but only %s is routed", i+1, h, framingHost)
		}
		for next < len(sent) && !(sent[next].method == got.method && sameTarget(sent[next].target, got.target) &&
			strings.EqualFold(sent[next].host, got.values("Host")[0])) {
			next++
		}
		if next == len(sent) {
			t.Fatalf("backend request %d was not sent as one request by the client:\n%s\nsent %+v", i+1, got, sent)
		}
		s := sent[next]
		// (A request cut inside its body, the pre-read cases, never reached
		// the backend whole: only the head was read the same.)
		if !rc.cut && (next >= len(strict) || strict[next].method != s.method || !sameTarget(strict[next].target, s.target) ||
			!strings.EqualFold(strict[next].host, s.host) || s.bodyKnown && !bytes.Equal(strict[next].body, s.body)) {
			var st any = "unreadable"
			if next < len(strict) {
				st = strict[next]
			}
			t.Fatalf("backend request %d: levee read %+v where a strict parser reads %+v\n%s", i+1, s, st, got)
		}
		next++
		// A connection cut inside the body is a body levee refused while
		// streaming it (preReadCases): allowed until the request pre-read.
		if !rc.cut && s.bodyKnown && !bytes.Equal(got.body, s.body) {
			t.Fatalf("backend request %d: body %q, client sent %q\n%s", i+1, got.body, s.body, got)
		}
	}
}

// FuzzFramingHTTP2 sends fuzzed HEADERS (any names and values, pseudo or
// not, in any order) and DATA over h2c and checks what reaches the
// backend as HTTP/1.1: strictly framed, meeting forwardingRules, with the
// client's method, path, authority and body, and no field the client did
// not send.
func FuzzFramingHTTP2(f *testing.F) {
	for _, c := range append(append([]h2Case{}, h2Cases...), h2PreReadCases...) {
		f.Add(encodeFields(c.fields), []byte(strings.Join(c.data, "")), len(c.data) > 0)
	}
	addr, be := framingProxy(f, true)
	h := &h2FramingClient{addr: addr}
	f.Cleanup(h.Close)
	f.Fuzz(func(t *testing.T, enc []byte, body []byte, withData bool) {
		if len(enc) > 8<<10 || len(body) > 16<<10 {
			return
		}
		fields := decodeFields(enc)
		var data []string
		if withData {
			data = []string{string(body)}
		}
		a, err := h.conn(t).do(fields, data)
		if err != nil {
			t.Fatalf("h2: %v", err)
		}
		checkH2Sent(t, be.settle(t), fields, data, a)
	})
}

// encodeFields writes fields as the fuzzer's input: for each, a byte of
// name length, the name, a byte of value length, the value.
func encodeFields(fields [][2]string) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, byte(len(f[0])))
		b = append(b, f[0]...)
		b = append(b, byte(len(f[1])))
		b = append(b, f[1]...)
	}
	return b
}

// decodeFields reads encodeFields' form; a length past the end takes what
// is left, so every input is some list of fields.
func decodeFields(b []byte) [][2]string {
	var out [][2]string
	next := func() string {
		n := min(int(b[0]), len(b)-1)
		s := string(b[1 : 1+n])
		b = b[1+n:]
		return s
	}
	for len(b) > 0 {
		name, value := next(), ""
		if len(b) > 0 {
			value = next()
		}
		out = append(out, [2]string{name, value})
	}
	return out
}

func checkH2Sent(t *testing.T, conns []*recConn, fields [][2]string, data []string, a h2Answer) {
	t.Helper()
	if len(conns) > 1 {
		t.Fatalf("one stream, %d backend requests", len(conns))
	}
	if len(conns) == 0 {
		return
	}
	rc := conns[0]
	if rc.err != nil {
		t.Fatalf("backend: %v\n%q", rc.err, rc.raw)
	}
	if len(rc.reqs) == 0 {
		t.Fatalf("backend connection cut before the end of the head\n%q", rc.raw)
	}
	got := &rc.reqs[0]
	if err := forwardingRules(got); err != nil {
		t.Fatalf("backend: %v\n%s", err, got)
	}
	sent := map[string][]string{}
	for _, f := range fields {
		sent[strings.ToLower(f[0])] = append(sent[strings.ToLower(f[0])], f[1])
	}
	// DATA beyond a declared content-length is refused by net/http only as
	// it arrives, perhaps after levee forwarded the declared part
	// (h2PreReadCases): the answer and the body are checked when the two
	// agree.
	body := strings.Join(data, "")
	agree := len(sent["content-length"]) == 0 || sent["content-length"][0] == strconv.Itoa(len(body))
	if !rc.cut && agree && a.status != 200 {
		t.Fatalf("backend got a request, client got %d (reset %v)\n%s", a.status, a.reset, got)
	}
	one := func(name string) string {
		if v := sent[name]; len(v) == 1 {
			return v[0]
		}
		t.Fatalf("forwarded, though %s was sent %d times\n%s", name, len(sent[name]), got)
		return ""
	}
	if m := one(":method"); m != got.method {
		t.Fatalf("method %q, client sent %q", got.method, m)
	}
	authority := sent[":authority"]
	if len(authority) == 0 {
		authority = sent["host"]
	}
	if len(authority) != 1 || !strings.EqualFold(got.values("Host")[0], authority[0]) {
		t.Fatalf("Host %q, client sent :authority/host %q", got.values("Host"), authority)
	}
	if p := one(":path"); got.target != p {
		in, err1 := url.ParseRequestURI(p)
		out, err2 := url.ParseRequestURI(got.target)
		if err1 != nil || err2 != nil || in.Path != out.Path || in.RawQuery != out.RawQuery {
			t.Fatalf("target %q, client sent :path %q", got.target, p)
		}
	}
	if !rc.cut && agree && string(got.body) != body {
		t.Fatalf("body %q, client sent %q", got.body, body)
	}
	own := map[string]bool{"host": true, "content-length": true, "transfer-encoding": true, "x-forwarded-for": true,
		"x-forwarded-host": true, "x-forwarded-proto": true, "forwarded": true, "levee-deadline": true}
	for _, f := range got.fields {
		name := strings.ToLower(f.name)
		switch {
		case own[name]:
		case name == "cookie":
			if f.value != strings.Join(sent["cookie"], "; ") {
				t.Fatalf("Cookie %q, client sent %q", f.value, sent["cookie"])
			}
		default:
			found := false
			for _, v := range sent[name] {
				found = found || v == f.value
			}
			if !found {
				t.Fatalf("%s: %q forwarded, client sent %q", f.name, f.value, sent[name])
			}
		}
	}
}

// hostOnly is a Host value without its port, if it has one.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		return h[:i]
	}
	return h
}
