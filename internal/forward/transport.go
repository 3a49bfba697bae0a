// Package forward sends admitted requests to backends over bounded
// connection pools and streams the responses back.
package forward

import (
	"net"
	"net/http"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// NewTransport returns an http.Transport for one app's backends, bounded per
// backend address: at most MaxConnsPerBackend connections (a request beyond
// that waits for one, and the app's concurrency limit bounds how many wait),
// and a real idle pool (MaxIdlePerBackend), not Go's default of 2, which
// under load closes and reopens connections until TIME_WAIT sockets exhaust
// the ephemeral ports.
func NewTransport(u config.Upstream) *http.Transport {
	idle := u.MaxIdlePerBackend
	if idle == 0 {
		idle = -1 // net/http reads 0 as its default of 2; -1 keeps none, as configured
	}
	return &http.Transport{
		DialContext:           newDialer(u).DialContext,
		MaxConnsPerHost:       u.MaxConnsPerBackend,
		MaxIdleConnsPerHost:   idle,
		MaxIdleConns:          0, // bounded per host above; no global cap to thrash
		IdleConnTimeout:       u.IdleTimeout.D(),
		ResponseHeaderTimeout: u.ResponseHeaderTimeout.D(),
		ExpectContinueTimeout: time.Second,
		// Pass bodies through as the backend sent them; never gunzip on the way.
		DisableCompression: true,
		// Backends speak HTTP/1.1 over plain TCP; keep one request per connection
		// so per-backend connection counts mean concurrent requests.
		ForceAttemptHTTP2: false,
		Proxy:             nil, // never honour HTTP_PROXY from the environment
	}
}

// newDialer bounds every connect to a backend by upstream.dial_timeout.
func newDialer(u config.Upstream) *net.Dialer {
	return &net.Dialer{Timeout: u.DialTimeout.D(), KeepAlive: 30 * time.Second}
}
