package config

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// Cluster shares every app's rate and client-rate limits among levee
// instances through Redis; off while Redis.Addrs is empty. See docs/cluster.md.
type Cluster struct {
	Redis Redis `yaml:"redis"`
	// Lease is the slice of a limit's budget an instance takes from Redis at
	// once, as time at the limit's rate (at least one request, at most half
	// the burst).
	Lease Duration `yaml:"lease"`
	// Heartbeat is how often an instance marks itself live in Redis, gives
	// back idle leases and, while Redis is unreachable, probes it.
	Heartbeat Duration `yaml:"heartbeat"`
	// KeyPrefix starts every Redis key levee writes.
	KeyPrefix string `yaml:"key_prefix"`
}

// Redis is how to reach the Redis that holds the shared limit state.
type Redis struct {
	// Addrs: one host:port (or a unix socket path) for a single node,
	// several for a Redis Cluster.
	Addrs    []string `yaml:"addrs"`
	Username string   `yaml:"username"`
	Password string   `yaml:"password"`
	DB       int      `yaml:"db"`
	// Timeout bounds every Redis call, connecting included; past it the
	// instance falls back to its fair share of each limit.
	Timeout Duration `yaml:"timeout"`
}

// Cluster defaults; docs/config.md states them.
const (
	DefaultClusterTimeout   = 50 * time.Millisecond
	DefaultClusterLease     = 10 * time.Millisecond
	DefaultClusterHeartbeat = time.Second
	DefaultClusterPrefix    = "levee"
)

// DefaultCluster is cluster mode off, with every other default filled in.
func DefaultCluster() Cluster {
	return Cluster{
		Redis:     Redis{Timeout: Duration(DefaultClusterTimeout)},
		Lease:     Duration(DefaultClusterLease),
		Heartbeat: Duration(DefaultClusterHeartbeat),
		KeyPrefix: DefaultClusterPrefix,
	}
}

// Enabled reports whether limits are shared through Redis.
func (c Cluster) Enabled() bool { return len(c.Redis.Addrs) > 0 }

func (c *Cluster) validate(errs *Errors) {
	for i, a := range c.Redis.Addrs {
		p := fmt.Sprintf("cluster.redis.addrs[%d]", i)
		if strings.HasPrefix(a, "/") {
			continue // a unix socket
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			errs.add(p, "want host:port or an absolute unix socket path, got %q", a)
		}
	}
	if c.Redis.DB < 0 || c.Redis.DB > 1000 {
		errs.add("cluster.redis.db", "want 0..1000, got %d", c.Redis.DB)
	}
	if c.Redis.DB != 0 && len(c.Redis.Addrs) > 1 {
		errs.add("cluster.redis.db", "a Redis Cluster (several addrs) has only db 0")
	}
	if c.Redis.Timeout < Duration(time.Millisecond) || c.Redis.Timeout > Duration(10*time.Second) {
		errs.add("cluster.redis.timeout", "want 1ms..10s, got %v", c.Redis.Timeout)
	}
	if c.Lease < Duration(100*time.Microsecond) || c.Lease > Duration(time.Second) {
		errs.add("cluster.lease", "want 100µs..1s, got %v", c.Lease)
	}
	if c.Heartbeat < Duration(100*time.Millisecond) || c.Heartbeat > Duration(time.Minute) {
		errs.add("cluster.heartbeat", "want 100ms..1m, got %v", c.Heartbeat)
	}
	if !validName(c.KeyPrefix) {
		errs.add("cluster.key_prefix", "want 1..128 letters, digits, '-', '_' or '.', got %q", c.KeyPrefix)
	}
}
