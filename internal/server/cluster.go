package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

var (
	_ limits.Store = (*ratelimit.LocalStore)(nil)
	_ limits.Store = (*cluster.Store)(nil)
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

// appRates is an app's rate limit state, each part made when its limit
// first comes on (an app without rate limits has none): the app's own
// bucket, a table of one key, and the clients', of limits.client.max_keys
// keys. The clients' table is sized once for the app's life: a smaller one
// would drop clients mid-burst, so a change of max_keys applies at
// restart. In cluster mode both are one store shared through Redis.
// Guarded by Server.mu; a route keeps the stores it was composed with.
type appRates struct {
	app, client limits.Store // nil while off
	shared      *cluster.Store
}

// applyRates makes the rate state rt's limits need and gives each rule
// its store.
func (s *Server) applyRates(a *app, rt *route, maxKeys int) {
	if rt.AppRate == nil && rt.ClientRate == nil {
		return
	}
	if a.rates == nil {
		a.rates = new(appRates)
	}
	r := a.rates
	if s.cluster != nil && r.shared == nil {
		st, err := s.cluster.Store(a.name, maxKeys, redisKeyName)
		if err != nil { // validated config: a broken invariant
			panic(fmt.Sprintf("server: cluster rate store: %v", err))
		}
		r.shared, r.app, r.client = st, st, st
	}
	if rt.AppRate != nil {
		if r.app == nil {
			r.app = newRateStore(1)
		}
		rt.AppRate.Store = r.app
	}
	if rt.ClientRate != nil {
		if r.client == nil {
			r.client = newRateStore(maxKeys)
		}
		rt.ClientRate.Store = r.client
	}
}

// sweep drops idle state at now.
func (r *appRates) sweep(now time.Time) {
	if r == nil {
		return
	}
	if r.shared != nil {
		r.shared.Sweep(now)
		return
	}
	for _, st := range []limits.Store{r.app, r.client} {
		if st != nil {
			st.Sweep(now)
		}
	}
}

// forget drops the state a removed app left in the cluster store.
func (r *appRates) forget() {
	if r != nil && r.shared != nil {
		r.shared.Close()
	}
}

// redisKeyName names an app's rate keys in Redis: the app's own limit and
// each client's cannot collide, since a client key never starts with NUL.
func redisKeyName(key string) string {
	if key == limits.AppKey {
		return "rate"
	}
	return "client:" + key
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
