// Package forward sends admitted requests to backends over bounded
// connection pools and streams the responses back.
package forward

import (
	"net"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// newDialer bounds every connect to a backend by upstream.dial_timeout.
func newDialer(u config.Upstream) *net.Dialer {
	return &net.Dialer{Timeout: u.DialTimeout.D(), KeepAlive: 30 * time.Second}
}
