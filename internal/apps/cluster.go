package apps

import (
	"context"
	"errors"
	"fmt"

	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/config"
)

// The cluster shares the apps' rate and bandwidth limits through Redis,
// so the table that owns those limits owns it: made with the table,
// closed with it.

// newCluster connects to the cluster's Redis when cfg turns cluster mode
// on (lazily: nothing is dialled before the first decision or heartbeat);
// nil when it is off.
func (t *Table) newCluster(cfg config.Cluster) *cluster.Cluster {
	if !cfg.Enabled() {
		return nil
	}
	c, err := cluster.New(cluster.Options{
		Addrs: cfg.Redis.Addrs, Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
		Timeout: cfg.Redis.Timeout.D(), Lease: cfg.Lease.D(), Heartbeat: cfg.Heartbeat.D(), Prefix: cfg.KeyPrefix,
		Clock: t.o.Clock, Logger: t.o.Logger,
	})
	if err != nil { // validated config: a broken invariant
		panic(fmt.Sprintf("apps: cluster: %v", err))
	}
	t.o.Metrics.Registry.MustRegister(c)
	return c
}

// Cluster is the cluster the apps' limits are shared through; nil
// outside cluster mode. Its owner runs its heartbeat (cluster.Run).
func (t *Table) Cluster() *cluster.Cluster { return t.cluster }

// Instance is this instance's role, scale and number of apps (Views),
// with the cluster's state in cluster mode; the caller adds the config's.
func (t *Table) Instance() Instance {
	in := t.views.Instance()
	if c := t.cluster; c != nil {
		in.Cluster = &ClusterState{Redis: t.o.Cluster.Redis.Addrs, Degraded: c.Degraded(), Reachable: !c.Degraded(),
			LiveInstances: c.Live()}
	}
	return in
}

// Close gives back the cluster's leases and closes its Redis connections;
// nothing outside cluster mode.
func (t *Table) Close() error {
	if t.cluster == nil {
		return nil
	}
	if err := t.cluster.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("apps: cluster: %w", err)
	}
	return nil
}
