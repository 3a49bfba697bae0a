package server

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// A request framed two ways (Content-Length and Transfer-Encoding) or with
// broken chunking is refused with 400: a proxy that passed it on could
// read the framing differently from its backend (request smuggling).
func TestBadFramingIsRefused(t *testing.T) {
	var arrived atomic.Int32
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		record(r)
	})
	p := startProxy(t, photosApp(backend, "", ""))
	addr := strings.TrimPrefix(p.URL, "http://")
	for _, tc := range []struct {
		name, raw string
	}{
		{"content-length and chunked", "POST / HTTP/1.1\r\nHost: photos.test\r\nContent-Length: 5\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: photos.test\r\n\r\n"},
		{"chunked and content-length", "POST / HTTP/1.1\r\nHost: photos.test\r\nTransfer-Encoding: chunked\r\n" +
			"content-length: 5\r\n\r\n0\r\n\r\n"},
		{"invalid chunk size", "POST / HTTP/1.1\r\nHost: photos.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br, _ := rawExchange(t, addr, tc.raw)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
			if next, err := http.ReadResponse(br, nil); err == nil {
				readAll(t, next)
				t.Errorf("a second response (%d) followed on the connection: the rest of the bytes was read as a request", next.StatusCode)
			}
		})
	}
}

// Forwarding and hop-by-hop headers are matched in any letter case: the
// fasthttp engine passes header names through as sent.
// TestIdentityHeadersNeedTrust: X-Real-IP and the underscore twins of the
// forwarding headers, which CGI, WSGI and PHP backends read as the real ones,
// reach the backend only from a peer in server.trusted_proxies. Sent raw over
// HTTP/1.1 (fasthttp) and by Go's client (fasthttp, or net/http in the h2c
// run), in several letter cases.
func TestIdentityHeadersNeedTrust(t *testing.T) {
	forged := [][2]string{
		{"X-Real-IP", "6.6.6.1"}, {"x-real-ip", "6.6.6.2"}, {"X_Real_IP", "6.6.6.3"},
		{"X_Forwarded_For", "6.6.6.4"}, {"x_forwarded_host", "evil.example"}, {"X_FORWARDED_PROTO", "https"},
	}
	for _, tc := range []struct {
		name, server string
		trusted      bool
	}{{"untrusted", "", false}, {"trusted", "server:\n  trusted_proxies: [127.0.0.1]\n", true}} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan seenRequest, 1)
			backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) { seen <- record(r) })
			p := startProxy(t, photosApp(backend, "", tc.server))
			check := func(how string) {
				t.Helper()
				s := recv(t, seen, "backend request")
				for _, f := range forged {
					var got []string
					for k, v := range s.header { // the backend canonicalises names its own way
						if strings.EqualFold(k, f[0]) {
							got = append(got, v...)
						}
					}
					if slices.Contains(got, f[1]) != tc.trusted {
						t.Errorf("%s, trusted %v: backend %s = %q", how, tc.trusted, f[0], got)
					}
				}
				if s.header.Get("X-Keep") != "kept" {
					t.Errorf("%s: X-Keep %q, want kept", how, s.header.Get("X-Keep"))
				}
			}

			raw := "GET / HTTP/1.1\r\nHost: photos.test\r\nX-Keep: kept\r\n"
			for _, f := range forged {
				raw += f[0] + ": " + f[1] + "\r\n"
			}
			br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), raw+"\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			check("raw HTTP/1.1")

			req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
			req.Host = "photos.test"
			req.Header["X-Keep"] = []string{"kept"}
			for _, f := range forged {
				req.Header[f[0]] = []string{f[1]} // as given, not canonicalised
			}
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			check("client " + testProto())
		})
	}
}

func TestHeaderNamesInAnyCase(t *testing.T) {
	seen := make(chan seenRequest, 1)
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) { seen <- record(r) })
	p := startProxy(t, photosApp(backend, "", ""))
	br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), "GET / HTTP/1.1\r\nHost: photos.test\r\n"+
		"x-forwarded-for: 6.6.6.6\r\nFORWARDED: for=6.6.6.6\r\nconnection: x-drop\r\nX-DROP: 1\r\n"+
		"keep-alive: 5\r\nx-keep: kept\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	s := recv(t, seen, "backend request")
	if got := s.header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want [127.0.0.1]: a forged value in lower case got through", got)
	}
	if got := s.header.Values("Forwarded"); len(got) != 1 || !strings.HasPrefix(got[0], "for=127.0.0.1;") {
		t.Errorf("Forwarded %q, want levee's own only", got)
	}
	for _, h := range []string{"X-Drop", "Keep-Alive", "Connection"} {
		if v, ok := s.header[h]; ok {
			t.Errorf("backend got hop-by-hop %s: %q", h, v)
		}
	}
	if s.header.Get("X-Keep") != "kept" {
		t.Errorf("X-Keep %q, want kept", s.header.Get("X-Keep"))
	}
}
