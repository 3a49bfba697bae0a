package forward

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/ascii"
	"github.com/leveeproxy/levee/internal/framing"
)

// fuzzRequests seed FuzzCopyRequest: valid requests and the framing and
// syntax tricks a smuggler tries. The same inputs are kept as files in
// testdata/fuzz/FuzzCopyRequest, where go test also writes failures.
var fuzzRequests = []string{
	"GET / HTTP/1.1\r\nHost: photos.test\r\n\r\n",
	"POST /upload?x=1 HTTP/1.1\r\nHost: photos.test\r\nContent-Length: 3\r\n\r\nabc",
	"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade, X-Secret\r\nUpgrade: websocket\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n",                                     // obs-fold
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",               // duplicate CL
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", // CL+TE
	"GET http://other.test/x HTTP/1.1\r\nHost: a\r\n\r\n",                                            // absolute-form
	"GET / HTTP/1.1\r\nHost: a\r\nX Spaced : v\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",      // names with spaces
	"GET / HTTP/1.1\r\nHost: a\r\nX-Nul: a\x00b\r\nX\x00Name: v\r\n\r\n",                             // NUL
	"GET / HTTP/1.1\nHost: a\nX-Bare: lf\n\n",                                                        // bare LF
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nTE: trailers, gzip\r\nProxy-Authorization: x\r\n\r\n",   // two Hosts
	"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nforwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nx_forwarded_for: 6.6.6.6\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: we\"ird\r\nProxy-Connection: keep-alive\r\nTrailer: X\r\n\r\n",
}

// fuzzPeer is the client's address; in the trusted case its /24 is trusted.
var fuzzPeer = netip.MustParseAddr("203.0.113.7")

// FuzzCopyRequest feeds raw bytes to fasthttp's request parser as levee's
// server reads them (header names as sent), drops what the framing rules
// refuse (package framing, the server's first step), and checks what copyRequest
// forwards: it parses again to the same fields, carries no hop-by-hop
// header, only levee's own forwarding headers (one each) and, from an
// untrusted peer, no identity header; names are tokens, there is at most one
// Host, and the method and request-URI are those received.
func FuzzCopyRequest(f *testing.F) {
	for _, r := range fuzzRequests {
		f.Add([]byte(r), false)
		f.Add([]byte(r), true)
	}
	// A head just under the 4 KiB read buffer; the forwarded one is over it.
	f.Add([]byte("GET / HTTP/1.1\r\nHost: "+strings.Repeat("y", 4050)+"\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, raw []byte, trusted bool) {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: fuzzPeer.AsSlice(), Port: 1}, nil)
		in := &ctx.Request.Header
		in.DisableNormalizing() // the server's DisableHeaderNamesNormalizing
		if err := ctx.Request.Read(bufio.NewReader(bytes.NewReader(raw))); err != nil {
			return // the server answers 400 or 431; nothing is forwarded
		}
		if framing.Fast(&ctx.Request) != nil {
			return // refused before routing (the server's first step)
		}
		trust := NewTrust(nil)
		if trusted {
			trust = NewTrust([]netip.Prefix{netip.PrefixFrom(fuzzPeer, 24).Masked()})
		}
		p := &Pool{trust: trust}
		var out fasthttp.RequestHeader
		upgrading := p.copyRequest(&ctx, &out)

		wire := out.Header()
		var back fasthttp.RequestHeader
		back.DisableNormalizing()
		// Forwarding adds headers, so a head that filled the client's read
		// buffer can outgrow a 4 KiB one: read it back with room for all of it.
		if err := back.Read(bufio.NewReaderSize(bytes.NewReader(wire), len(wire)+1)); err != nil {
			t.Fatalf("forwarded request does not parse: %v\n%q", err, wire)
		}
		if got := fields(&back); !equalFields(got, fields(&out)) {
			t.Fatalf("forwarded request parses to other fields:\nsent   %q\nparsed %q", fields(&out), got)
		}
		if !bytes.Equal(back.Method(), in.Method()) {
			t.Fatalf("method %q, received %q", back.Method(), in.Method())
		}
		if !bytes.Equal(back.RequestURI(), in.RequestURI()) {
			t.Fatalf("request-URI %q, received %q", back.RequestURI(), in.RequestURI())
		}

		conn, upgrade := connectionOf(in)
		counts := map[string]int{}
		for k, v := range back.All() {
			for _, c := range k {
				if !isTokenChar(c) {
					t.Fatalf("header name %q has a non-token byte %q", k, c)
				}
			}
			lk := string(bytes.ToLower(k))
			counts[lk]++
			switch {
			case lk == "connection" || lk == "upgrade":
				want := "Upgrade"
				if lk == "upgrade" {
					want = string(upgrade)
				}
				if !upgrading || string(v) != want {
					t.Fatalf("forwarded %s: %q (upgrading %v)", k, v, upgrading)
				}
			case lk == "te":
				if string(v) != "trailers" {
					t.Fatalf("forwarded TE: %q", v)
				}
			case lk == "content-length":
				// fasthttp's own framing of the outgoing request, never the client's.
				if string(v) != strconv.Itoa(out.ContentLength()) {
					t.Fatalf("forwarded Content-Length %q, outgoing request has %d", v, out.ContentLength())
				}
			case lk == "transfer-encoding" || lk == "keep-alive" || lk == "trailer" ||
				lk == "expect" || lk == "proxy-connection" || lk == "proxy-authenticate" || lk == "proxy-authorization":
				// Only these Proxy-* fields are hop-by-hop (RFC 9110 §7.6.1, §11.7);
				// another Proxy-X is an end-to-end field like any other.
				t.Fatalf("forwarded hop-by-hop header %s: %q", k, v)
			case conn.has(k) && !(upgrading && ascii.EqualFold(k, "Upgrade")):
				t.Fatalf("forwarded %s, which Connection lists", k)
			case isIdentity(k) && !trusted:
				t.Fatalf("forwarded identity header %s: %q from an untrusted peer", k, v)
			}
		}
		if counts["host"] > 1 {
			t.Fatalf("%d Host headers forwarded", counts["host"])
		}
		for _, name := range []string{"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "forwarded"} {
			if counts[name] != 1 {
				t.Fatalf("%d %s headers forwarded, want 1\n%q", counts[name], name, wire)
			}
		}
		if !trusted {
			want := trust.forwarded(fuzzPeer, string(in.Host()), false, fastHeader{in})
			got := forwarded{xff: string(back.Peek("X-Forwarded-For")), host: string(back.Peek("X-Forwarded-Host")),
				proto: string(back.Peek("X-Forwarded-Proto")), fwd: string(back.Peek("Forwarded"))}
			if got != want {
				t.Fatalf("forwarding headers %+v, want levee's own %+v", got, want)
			}
		}
	})
}

// fields lists h's header fields in order, as name: value lines. A value's
// leading and trailing whitespace is not part of it (RFC 9112 §5.1): a
// folded line can leave some, which the next parser trims.
func fields(h *fasthttp.RequestHeader) []string {
	var out []string
	for k, v := range h.All() {
		out = append(out, string(k)+": "+string(trimSpace(v)))
	}
	return out
}

func equalFields(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c may appear in a header name (RFC 9110 §5.6.2).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}
