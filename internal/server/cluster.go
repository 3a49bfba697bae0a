package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/config"
)

// newCluster connects to the cluster's Redis when cfg turns cluster mode on
// (lazily: nothing is dialled before the first decision or heartbeat).
func (s *Server) newCluster(cfg config.Cluster) *cluster.Cluster {
	if !cfg.Enabled() {
		return nil
	}
	c, err := cluster.New(cluster.Options{
		Addrs: cfg.Redis.Addrs, Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
		Timeout: cfg.Redis.Timeout.D(), Lease: cfg.Lease.D(), Heartbeat: cfg.Heartbeat.D(), Prefix: cfg.KeyPrefix,
		Clock: s.clk, Logger: s.log,
	})
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("server: cluster: %v", err))
	}
	s.metrics.Registry.MustRegister(c)
	return c
}

// closeCluster gives back leases and closes the Redis connections.
func (s *Server) closeCluster() error {
	if s.cluster == nil {
		return nil
	}
	if err := s.cluster.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("server: cluster: %w", err)
	}
	return nil
}
