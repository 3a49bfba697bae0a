package apps

import "github.com/leveeproxy/levee/internal/ratelimit"

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
