package trace

import "testing"

// attrOf is sp's attribute key as a string ("" when absent).
func attrOf(sp *Span, key string) (string, bool) {
	for _, a := range sp.attrs {
		if a.key == key {
			if a.isInt {
				return "", true
			}
			return string(sp.str(a.str)), true
		}
	}
	return "", false
}

// TestDescribeHTTPServer: the span's name and attributes follow the HTTP
// semantic conventions: a method outside the standard set is _OTHER (so
// names stay few), the port is split off the host (brackets off IPv6),
// only a 5xx is an error, and a refusal's reason is its error type.
func TestDescribeHTTPServer(t *testing.T) {
	for _, tc := range []struct {
		v               HTTPServer
		code            int
		method, address string
		port, errType   bool
		isErr           bool
	}{
		{HTTPServer{Method: "GET", Host: "a.test:8080"}, 200, "GET", "a.test", true, false, false},
		{HTTPServer{Method: "BREW", Host: "[::1]"}, 404, "_OTHER", "::1", false, false, false},
		{HTTPServer{Method: "GET", Host: "a.test", Reject: "rate"}, 429, "GET", "a.test", false, true, false},
		{HTTPServer{Method: "GET", Host: "a.test", Error: "backend-timeout"}, 504, "GET", "a.test", false, true, true},
	} {
		sp := NewSpan()
		sp.DescribeHTTPServer("app", tc.code, &tc.v)
		m, _ := attrOf(sp, "http.request.method")
		host, _ := attrOf(sp, "server.address")
		_, port := attrOf(sp, "server.port")
		_, errType := attrOf(sp, "error.type")
		if m != tc.method || host != tc.address || port != tc.port || errType != tc.errType || sp.Error != tc.isErr {
			t.Errorf("%+v %d: method %q address %q port %v error.type %v error %v", tc.v, tc.code, m, host, port, errType, sp.Error)
		}
		sp.Free()
	}
}
