package trace

import (
	"net"
	"strconv"
)

// HTTPServer is what a server span records of an HTTP request that only
// its engine can read; views, valid until the span is described.
type HTTPServer struct {
	Method, Path, Scheme, Host, Proto, Client, UserAgent string
	Reject, Error                                        string // the answer's Levee-Reject and Levee-Error
}

// DescribeHTTPServer writes the attributes of the OpenTelemetry semantic
// conventions for an HTTP server span of app, answered with code, and
// levee's own; it sets the span's name and its error status.
func (sp *Span) DescribeHTTPServer(app string, code int, v *HTTPServer) {
	if knownMethod(v.Method) {
		sp.SetName(v.Method, app)
		sp.Str("http.request.method", v.Method)
	} else {
		// A method outside the standard set would make names of any cardinality.
		sp.SetName("HTTP", app)
		sp.Str("http.request.method", "_OTHER")
		sp.Str("http.request.method_original", v.Method)
	}
	sp.Str("url.path", v.Path)
	sp.Str("url.scheme", v.Scheme)
	host, port := splitHostPort(v.Host)
	sp.Str("server.address", host)
	if port > 0 {
		sp.Int("server.port", int64(port))
	}
	sp.Str("network.protocol.version", v.Proto)
	if v.Client != "" {
		sp.Str("client.address", v.Client)
	}
	if v.UserAgent != "" {
		sp.Str("user_agent.original", v.UserAgent)
	}
	if code > 0 {
		sp.Int("http.response.status_code", int64(code))
	}
	sp.Str("levee.app", app)
	switch {
	case v.Reject != "":
		sp.Str("error.type", v.Reject)
		sp.Str("levee.reject", v.Reject)
	case code >= 500 && v.Error != "":
		sp.Str("error.type", v.Error)
	case code >= 500:
		sp.Str("error.type", strconv.Itoa(code))
	}
	// Server spans: only a 5xx is an error, a 4xx is the client's.
	sp.Error = code >= 500
}

func knownMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}

// splitHostPort splits a Host header: the host (IPv6 without brackets),
// and the port, 0 when there is none.
func splitHostPort(hostport string) (string, int) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			return h, n
		}
		return h, 0
	}
	if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
		return hostport[1 : len(hostport)-1], 0
	}
	return hostport, 0
}
