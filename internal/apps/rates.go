package apps

import (
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/cluster"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

var (
	_ limits.Store = (*ratelimit.LocalStore)(nil)
	_ limits.Store = (*cluster.Store)(nil)
)

// Rates is an app's rate limit state, each part made when its limit
// first comes on (an app without rate limits has none): the app's own
// bucket, a table of one key, and the clients', of limits.client.max_keys
// keys. The clients' table is sized once for the app's life: a smaller one
// would drop clients mid-burst, so a change of max_keys applies at
// restart. In cluster mode both are one store shared through Redis.
// The zero Rates holds nothing; it is kept across reloads so that a
// reload never hands out a fresh burst, guarded by its owner's lock. A
// route keeps the stores it was composed with.
type Rates struct {
	app, client limits.Store // nil while off
	shared      *cluster.Store
}

// Apply makes the state g's rate rules need and gives each rule its
// store. c is the cluster that shares the app's limits through Redis (nil
// outside cluster mode); app names its keys there.
func (r *Rates) Apply(g *limits.Gate, c *cluster.Cluster, app string, maxKeys int) {
	if g.AppRate == nil && g.ClientRate == nil {
		return
	}
	if c != nil && r.shared == nil {
		st, err := c.Store(app, maxKeys, redisKeyName)
		if err != nil { // validated config: a broken invariant
			panic(fmt.Sprintf("apps: cluster rate store: %v", err))
		}
		r.shared, r.app, r.client = st, st, st
	}
	if g.AppRate != nil {
		if r.app == nil {
			r.app = limits.NewStore(1)
		}
		g.AppRate.Store = r.app
	}
	if g.ClientRate != nil {
		if r.client == nil {
			r.client = limits.NewStore(maxKeys)
		}
		g.ClientRate.Store = r.client
	}
}

// Local returns the app's and its clients' rate stores when they are this
// process's own (nil when off, or shared through the cluster's Redis,
// which outlives any one process), for an upgrade to hand over.
func (r *Rates) Local() (app, client *ratelimit.LocalStore) {
	if r.shared != nil {
		return nil, nil
	}
	app, _ = r.app.(*ratelimit.LocalStore)
	client, _ = r.client.(*ratelimit.LocalStore)
	return app, client
}

// Sweep drops idle state at now.
func (r *Rates) Sweep(now time.Time) {
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

// Forget drops the state a removed app left in the cluster store.
func (r *Rates) Forget() {
	if r.shared != nil {
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
