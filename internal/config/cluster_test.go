package config

import (
	"reflect"
	"testing"
	"time"
)

func TestClusterParses(t *testing.T) {
	cfg := mustParse(t, `
cluster:
  redis: {addrs: ["10.0.0.1:6379", "10.0.0.2:6379", /run/redis.sock], username: levee, password: secret, timeout: 20ms}
  lease: 5ms
  heartbeat: 500ms
  key_prefix: edge-eu
`)
	want := Cluster{
		Redis: Redis{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "/run/redis.sock"}, Username: "levee",
			Password: "secret", Timeout: Duration(20 * time.Millisecond)},
		Lease: Duration(5 * time.Millisecond), Heartbeat: Duration(500 * time.Millisecond), KeyPrefix: "edge-eu",
	}
	if !reflect.DeepEqual(cfg.Cluster, want) || !cfg.Cluster.Enabled() {
		t.Errorf("Cluster = %+v, want %+v", cfg.Cluster, want)
	}
}

func TestClusterValidation(t *testing.T) {
	for _, tt := range []struct{ src, path, frag string }{
		{"cluster: {redis: {addrs: [localhost]}}", "cluster.redis.addrs[0]", "host:port"},
		{"cluster: {redis: {addrs: [':6379']}}", "cluster.redis.addrs[0]", "host:port"},
		{"cluster: {redis: {db: -1}}", "cluster.redis.db", "0..1000"},
		{"cluster: {redis: {addrs: ['a:1', 'b:1'], db: 2}}", "cluster.redis.db", "only db 0"},
		{"cluster: {redis: {timeout: 0s}}", "cluster.redis.timeout", "1ms..10s"},
		{"cluster: {redis: {timeout: 11s}}", "cluster.redis.timeout", "1ms..10s"},
		{"cluster: {lease: 0s}", "cluster.lease", "100µs..1s"},
		{"cluster: {lease: 2s}", "cluster.lease", "100µs..1s"},
		{"cluster: {heartbeat: 10ms}", "cluster.heartbeat", "100ms..1m"},
		{"cluster: {key_prefix: 'a:b'}", "cluster.key_prefix", "letters"},
		{"cluster: {key_prefix: ''}", "cluster.key_prefix", "letters"},
	} {
		t.Run(tt.src, func(t *testing.T) {
			wantErr(t, parseErrs(t, tt.src), tt.path, tt.frag)
		})
	}
}
