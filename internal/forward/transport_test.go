package forward

import (
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// The transport must carry every upstream bound from the config, never Go's
// defaults (2 idle connections per host, no dial or header timeout).
func TestTransportCarriesTheUpstreamBounds(t *testing.T) {
	u := config.Default().Upstream
	u.MaxConnsPerBackend, u.MaxIdlePerBackend = 17, 9
	u.DialTimeout = config.Duration(1500 * time.Millisecond)
	u.ResponseHeaderTimeout = config.Duration(7 * time.Second)
	u.IdleTimeout = config.Duration(11 * time.Second)
	tr := NewTransport(u)
	checks := []struct {
		name      string
		got, want any
	}{
		{"MaxConnsPerHost", tr.MaxConnsPerHost, 17},
		{"MaxIdleConnsPerHost", tr.MaxIdleConnsPerHost, 9},
		{"IdleConnTimeout", tr.IdleConnTimeout, 11 * time.Second},
		{"ResponseHeaderTimeout", tr.ResponseHeaderTimeout, 7 * time.Second},
		{"dial timeout", newDialer(u).Timeout, 1500 * time.Millisecond},
		{"DisableCompression", tr.DisableCompression, true},
		{"Proxy from environment", tr.Proxy == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
		}
	}
	if tr.DialContext == nil {
		t.Error("no DialContext: the dial timeout would not apply")
	}
}

func TestDefaultIdlePoolIsNotGosTwo(t *testing.T) {
	if got := NewTransport(config.Default().Upstream).MaxIdleConnsPerHost; got != config.DefaultMaxIdlePerBackend || got <= 2 {
		t.Fatalf("default idle connections per backend = %d; want %d (Go's 2 causes TIME_WAIT storms)", got, config.DefaultMaxIdlePerBackend)
	}
}

// max_idle_per_backend: 0 means no idle connections, not Go's default of 2.
func TestZeroIdlePoolKeepsNone(t *testing.T) {
	u := config.Default().Upstream
	u.MaxIdlePerBackend = 0
	if got := NewTransport(u).MaxIdleConnsPerHost; got >= 0 {
		t.Fatalf("MaxIdleConnsPerHost = %d for max_idle_per_backend 0; want negative (keep none)", got)
	}
}
