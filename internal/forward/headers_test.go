package forward

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestForwardedElement(t *testing.T) {
	for _, tc := range []struct {
		name        string
		peer        netip.Addr
		host, proto string
		want        string
	}{
		{"ipv4", netip.MustParseAddr("192.0.2.60"), "photos.test", "http",
			`for=192.0.2.60;host=photos.test;proto=http`},
		// RFC 7239 §6: an IPv6 node is bracketed, and the brackets and
		// colons are outside the token grammar, so the value is quoted.
		{"ipv6", netip.MustParseAddr("2001:db8:cafe::17"), "photos.test", "https",
			`for="[2001:db8:cafe::17]";host=photos.test;proto=https`},
		{"ipv6 loopback", netip.IPv6Loopback(), "photos.test", "http",
			`for="[::1]";host=photos.test;proto=http`},
		{"unknown peer", netip.Addr{}, "photos.test", "http",
			`for=unknown;host=photos.test;proto=http`},
		{"host with port is quoted", netip.MustParseAddr("192.0.2.60"), "photos.test:8443", "https",
			`for=192.0.2.60;host="photos.test:8443";proto=https`},
		{"ipv6 host literal is quoted", netip.MustParseAddr("2001:db8::1"), "[2001:db8::2]:8080", "http",
			`for="[2001:db8::1]";host="[2001:db8::2]:8080";proto=http`},
		{"quotes and backslashes are escaped", netip.MustParseAddr("192.0.2.60"), `a"b\c`, "http",
			`for=192.0.2.60;host="a\"b\\c";proto=http`},
		{"no host", netip.MustParseAddr("192.0.2.60"), "", "http",
			`for=192.0.2.60;proto=http`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := forwardedElement(tc.peer, tc.host, tc.proto); got != tc.want {
				t.Errorf("forwardedElement(%v, %q, %q)\n got %s\nwant %s", tc.peer, tc.host, tc.proto, got, tc.want)
			}
		})
	}
}

func TestSetForwardedIPv6Peer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		trust      Trust
		remoteAddr string
		tls        bool
		in         http.Header
		want       http.Header
	}{{
		name:       "untrusted ipv6 peer over tls",
		remoteAddr: "[2001:db8::7]:51000",
		tls:        true,
		in: http.Header{
			"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"evil.test"},
			"X-Forwarded-Proto": {"http"}, "Forwarded": {"for=6.6.6.6"},
		},
		want: http.Header{
			"X-Forwarded-For":   {"2001:db8::7"},
			"X-Forwarded-Host":  {"photos.test"},
			"X-Forwarded-Proto": {"https"},
			"Forwarded":         {`for="[2001:db8::7]";host=photos.test;proto=https`},
		},
	}, {
		name:       "ipv4-mapped peer is written as ipv4",
		remoteAddr: "[::ffff:192.0.2.1]:80",
		want: http.Header{
			"X-Forwarded-For":   {"192.0.2.1"},
			"X-Forwarded-Host":  {"photos.test"},
			"X-Forwarded-Proto": {"http"},
			"Forwarded":         {`for=192.0.2.1;host=photos.test;proto=http`},
		},
	}, {
		name:       "trusted ipv6 peer extends the chain",
		trust:      NewTrust([]netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}),
		remoteAddr: "[2001:db8::7]:51000",
		in: http.Header{
			"X-Forwarded-For": {"192.0.2.60", "198.51.100.1"}, "X-Forwarded-Host": {"orig.test"},
			"X-Forwarded-Proto": {"https"}, "Forwarded": {"for=192.0.2.60;proto=https"},
		},
		want: http.Header{
			"X-Forwarded-For":   {"192.0.2.60, 198.51.100.1, 2001:db8::7"},
			"X-Forwarded-Host":  {"orig.test"},
			"X-Forwarded-Proto": {"https"},
			"Forwarded":         {`for=192.0.2.60;proto=https, for="[2001:db8::7]";host=photos.test;proto=http`},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := httptest.NewRequest(http.MethodGet, "http://photos.test/", nil)
			in.RemoteAddr = tc.remoteAddr
			if tc.tls {
				in.TLS = &tls.ConnectionState{}
			}
			for k, v := range tc.in {
				in.Header[k] = v
			}
			out := httpHead(tc.trust, in)
			for k, want := range tc.want {
				if got := out[k]; len(got) != len(want) || got[0] != want[0] {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestHTTPRequestNeverUpgrades: net/http's requests (HTTP/2) pass on no
// upgrade, h2c's least of all (golang/go#80416: a backend that accepted
// would carry any number of requests past levee's routing and limits).
func TestHTTPRequestNeverUpgrades(t *testing.T) {
	for _, upgrade := range []string{"h2c", "H2C", "websocket, h2c", "h2c/1.0", "websocket"} {
		in := httptest.NewRequest(http.MethodGet, "http://photos.test/", nil)
		in.Header = http.Header{"Connection": {"Upgrade"}, "Upgrade": {upgrade},
			"Http2-Settings": {"AAMAAABkAARAAAAAAAIAAAAA"}, "X-Keep": {"1"}}
		out := httpHead(Trust{}, in)
		for _, k := range []string{"Upgrade", "Connection", "Http2-Settings"} {
			if v, ok := out[k]; ok {
				t.Errorf("Upgrade: %s: %s = %q passed on", upgrade, k, v)
			}
		}
		if out.Get("X-Keep") != "1" {
			t.Errorf("Upgrade: %s: an unrelated header was removed", upgrade)
		}
	}
}

// httpHead is the head a backend gets for in (net/http engine) from levee
// trusting trust, as an http.Header.
func httpHead(trust Trust, in *http.Request) http.Header {
	var out fasthttp.RequestHeader
	(&httpDown{r: in}).copyHead(&Pool{trust: trust}, &out, TraceHeaders{})
	h := http.Header{}
	for k, v := range out.All() {
		h[string(k)] = append(h[string(k)], string(v))
	}
	return h
}

func TestOnlyIdempotentRequestsAreRetried(t *testing.T) {
	for _, tt := range []struct {
		method string
		want   bool
	}{{"GET", true}, {"HEAD", true}, {"PUT", true}, {"DELETE", true}, {"OPTIONS", true}, {"POST", false}, {"PATCH", false}} {
		var h fasthttp.RequestHeader
		h.SetMethod(tt.method)
		if got := isIdempotent(&h); got != tt.want {
			t.Errorf("isIdempotent(%s) = %v; want %v", tt.method, got, tt.want)
		}
	}
}

// The fasthttp engine's forwarding headers, appended without allocating,
// are those Trust.forwarded computes, for every kind of peer and host.
func TestSetForwardedFastMatchesForwarded(t *testing.T) {
	trust := NewTrust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	for _, peer := range []string{"192.0.2.7", "2001:db8::1", "10.1.2.3", ""} {
		for _, host := range []string{"photos.test", "photos.test:8080", `we"ird host`, ""} {
			var ctx fasthttp.RequestCtx
			var addr net.Addr
			if peer != "" {
				addr = &net.TCPAddr{IP: net.ParseIP(peer), Port: 1}
			}
			ctx.Init(&fasthttp.Request{}, addr, nil)
			ctx.Request.Header.SetHost(host)
			ctx.Request.Header.Set("X-Forwarded-For", "1.1.1.1")
			var out fasthttp.RequestHeader
			trust.setForwardedFast(&ctx, &out)
			var ip netip.Addr
			if a, ok := netip.AddrFromSlice(ctx.RemoteIP()); ok {
				ip = a.Unmap()
			}
			want := trust.forwarded(ip, host, false, fastHeader{&ctx.Request.Header})
			got := forwarded{xff: string(out.Peek("X-Forwarded-For")), host: string(out.Peek("X-Forwarded-Host")),
				proto: string(out.Peek("X-Forwarded-Proto")), fwd: string(out.Peek("Forwarded"))}
			if got != want {
				t.Errorf("peer %q host %q: got %+v, want %+v", peer, host, got, want)
			}
		}
	}
}

// BenchmarkCopyRequest is the forward step's own work on the HTTP/1.1 path
// for a request from an untrusted peer: the request line, end-to-end
// headers and levee's forwarding headers onto the backend request.
func BenchmarkCopyRequest(b *testing.B) {
	p := &Pool{trust: NewTrust(nil)}
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}, nil)
	h := &ctx.Request.Header
	h.SetMethod("GET")
	h.SetRequestURI("/photos/1?size=large")
	h.SetHost("photos.test")
	h.Set("User-Agent", "bench")
	h.Set("Accept", "*/*")
	var out fasthttp.RequestHeader
	b.ReportAllocs()
	for b.Loop() {
		out.Reset()
		p.copyRequest(&ctx, &out)
	}
}

// identityForged are client-sent identity headers levee does not set, in
// the cases clients send them.
var identityForged = map[string]string{
	"X-Real-IP":         "6.6.6.6",
	"x-real-ip":         "6.6.6.7",
	"X_Real_IP":         "6.6.6.8",
	"X_Forwarded_For":   "6.6.6.9",
	"x_forwarded_host":  "evil.example",
	"X_FORWARDED_PROTO": "https",
}

// TestIdentityHeadersNeedTrust: on both engines, X-Real-IP and the
// underscore twins of X-Forwarded-* pass only from a trusted peer.
func TestIdentityHeadersNeedTrust(t *testing.T) {
	trust := NewTrust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	for _, tc := range []struct {
		peer    string
		trusted bool
	}{{"192.0.2.7", false}, {"10.1.2.3", true}, {"::ffff:10.1.2.3", true}} {
		t.Run("fasthttp "+tc.peer, func(t *testing.T) {
			p := &Pool{trust: trust}
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.ParseIP(tc.peer), Port: 1}, nil)
			ctx.Request.Header.DisableNormalizing()
			for k, v := range identityForged {
				ctx.Request.Header.Set(k, v)
			}
			ctx.Request.Header.Set("X-Keep", "kept")
			var out fasthttp.RequestHeader
			p.copyRequest(&ctx, &out)
			for k, v := range identityForged {
				if got := string(out.Peek(k)); (got == v) != tc.trusted {
					t.Errorf("trusted %v: backend %s = %q", tc.trusted, k, got)
				}
			}
			if string(out.Peek("X-Keep")) != "kept" {
				t.Error("X-Keep dropped")
			}
		})
		t.Run("net/http "+tc.peer, func(t *testing.T) {
			in := httptest.NewRequest(http.MethodGet, "http://photos.test/", nil)
			in.RemoteAddr = net.JoinHostPort(tc.peer, "1")
			in.Header.Set("X-Keep", "kept")
			for k, v := range identityForged {
				in.Header[k] = []string{v} // as given: HTTP/2 names are lower case, others as sent
			}
			out := httpHead(trust, in)
			for k, v := range identityForged {
				if got := out[k]; (len(got) == 1 && got[0] == v) != tc.trusted {
					t.Errorf("trusted %v: backend %s = %q", tc.trusted, k, got)
				}
			}
			if out.Get("X-Keep") != "kept" {
				t.Error("X-Keep dropped")
			}
		})
	}
}

// TestCopyRequestDropsIdentityWithoutAllocating: dropping forged identity
// headers keeps the fasthttp path allocation-free.
func TestCopyRequestDropsIdentityWithoutAllocating(t *testing.T) {
	p := &Pool{trust: NewTrust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})}
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}, nil)
	h := &ctx.Request.Header
	h.DisableNormalizing()
	h.SetMethod("GET")
	h.SetRequestURI("/")
	h.SetHost("photos.test")
	for k, v := range identityForged {
		h.Set(k, v)
	}
	var out fasthttp.RequestHeader
	allocs := testing.AllocsPerRun(100, func() {
		out.Reset()
		p.copyRequest(&ctx, &out)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per copyRequest, want 0", allocs)
	}
}
