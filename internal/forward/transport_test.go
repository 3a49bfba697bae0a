package forward

import (
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// The pool must carry every upstream bound from the config, never a
// library's defaults (no connection cap, no dial or header timeout).
func TestPoolCarriesTheUpstreamBounds(t *testing.T) {
	u := config.Default().Upstream
	u.MaxConnsPerBackend, u.MaxIdlePerBackend = 17, 9
	u.DialTimeout = config.Duration(1500 * time.Millisecond)
	u.ResponseHeaderTimeout = config.Duration(7 * time.Second)
	u.IdleTimeout = config.Duration(11 * time.Second)
	hc, d, pool := newFastClient("127.0.0.1:1", u, nil, nil)
	checks := []struct {
		name      string
		got, want any
	}{
		{"max conns", pool.max, 17},
		{"reuse", d.stats.reuse, true},
		{"idle timeout", pool.idleFor, 11 * time.Second},
		{"ReadTimeout (response header)", hc.ReadTimeout, 7 * time.Second},
		{"wait for a connection", pool.wait, 7 * time.Second},
		{"dial timeout", d.d.Timeout, 1500 * time.Millisecond},
		{"exchange", hc.Transport != nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
		}
	}
}
