package admin

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// refusal is one way the admin listener turns a request away. Every
// refusal's status, header and body live in refusals, nowhere else.
type refusal int

const (
	refuseHost refusal = iota
	refuseToken
	refuseOrigin
	refuseRemote
)

var refusals = [...]struct {
	code   int
	header [2]string // one header to set, or none
	body   string
}{
	// 421: this listener does not serve that authority. A DNS-rebinding
	// page reaches a loopback port under its own name, never under ours.
	refuseHost:  {http.StatusMisdirectedRequest, [2]string{}, "admin: Host not allowed; use 127.0.0.1, localhost or the admin address\n"},
	refuseToken: {http.StatusUnauthorized, [2]string{"WWW-Authenticate", "Bearer"}, "admin: a valid bearer token is required (admin.token_file)\n"},
	refuseOrigin: {http.StatusForbidden, [2]string{}, "admin: cross-origin requests may not change state; " +
		"send no Origin header (curl, scripts), or set admin.token_file and send the token\n"},
	refuseRemote: {http.StatusForbidden, [2]string{}, "admin: without admin.token_file, state changes are allowed on a loopback admin listener only\n"},
}

func (r refusal) write(w http.ResponseWriter) {
	rf := refusals[r]
	if rf.header[0] != "" {
		w.Header().Set(rf.header[0], rf.header[1])
	}
	http.Error(w, strings.TrimSuffix(rf.body, "\n"), rf.code)
}

// guard holds what the admin listener checks before any handler runs.
type guard struct {
	token    []byte // nil: no token configured
	addrHost string // the admin address's host, accepted in Host
	anyIP    bool   // the admin address binds every address (0.0.0.0, ::, empty)
}

func newGuard(o Options) *guard {
	g := &guard{}
	if o.Token != "" {
		g.token = []byte(o.Token)
	}
	if host, _, err := net.SplitHostPort(o.Addr); err == nil {
		g.addrHost = host
		ip := net.ParseIP(host)
		g.anyIP = host == "" || ip != nil && ip.IsUnspecified()
	}
	return g
}

// hostAllowed reports whether a request's Host names this listener: a
// loopback name or IP, or the admin address's host. On a listener bound to
// every address any IP literal is allowed too: rebinding needs a DNS name,
// and an IP literal cannot be rebound.
func (g *guard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || (g.addrHost != "" && strings.EqualFold(host, g.addrHost)) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || g.anyIP)
}

// checkHost wraps every admin endpoint in the Host check.
func (g *guard) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			refuseHost.write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mutating wraps an endpoint that changes state. With a token, a valid
// Authorization: Bearer is required and enough: a browser cannot send one
// cross-origin without a CORS preflight, which the admin listener never
// grants. Without a token, the request must come to a loopback listener and
// not from a browser page of another origin: no Origin header, or Origin
// http://<Host>, and no cross-site Sec-Fetch-Site.
func (g *guard) mutating(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.token != nil {
			if !g.bearerOK(r.Header.Get("Authorization")) {
				refuseToken.write(w)
				return
			}
			next(w, r)
			return
		}
		if !localConn(r) {
			refuseRemote.write(w)
			return
		}
		if o, ok := r.Header["Origin"]; ok && (len(o) != 1 || o[0] != "http://"+r.Host) {
			refuseOrigin.write(w)
			return
		}
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
			refuseOrigin.write(w)
			return
		}
		next(w, r)
	}
}

func (g *guard) bearerOK(h string) bool {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// Constant time, so the token cannot be guessed byte by byte from timing.
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), g.token) == 1
}

// localConn reports whether r arrived on a loopback address of this host.
// Validation already refuses a non-loopback admin without a token; this
// holds the same line for any other caller of Handler.
func localConn(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return true // not from a net/http server (a test's ServeHTTP): no socket to judge
	}
	tcp, ok := a.(*net.TCPAddr)
	return !ok || tcp.IP.IsLoopback()
}
