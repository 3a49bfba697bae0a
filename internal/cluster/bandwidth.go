package cluster

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/bandwidth"
)

// Bandwidth limits are shared by demand, not counted in Redis: a byte
// cannot wait on a round trip, and each app's bytes are paced in process by
// its bandwidth.Limiter. Each heartbeat, every instance publishes, per app,
// the bytes per second it wants (the hash <prefix>:<app>:bw, field = the
// instance, value "<bytes/s> <ms>", entries older than 3 heartbeats
// dropped), reads the others', and sets its limiter's rate to its share:
//
//	share = limit × own demand ÷ total demand,
//
// with a floor of FloorPercent of limit ÷ live instances (so an idle
// instance can start at once, and learns its demand) and the shares above
// the floor scaled so that all of them sum to the limit. An instance with
// no demand published yet (before its first heartbeat) is left limit ÷ live,
// what it starts with. With no demand anywhere the limit is split evenly. While Redis is unreachable
// each instance paces to limit ÷ live instances, as it does for rates.
//
// Demand is what asked to pass over the heartbeat: the bytes that passed
// plus, for each connection still waiting (an ask queued), the whole limit,
// since that is what it could take if it were alone. So an instance whose
// connections are all served asks for what it used, and the rest goes to
// the busy ones in proportion to their waiting connections, as one limiter
// would share the bytes among all of them.

// FloorPercent is the part of a bandwidth limit reserved, evenly, for
// instances that want less (an idle one gets limit × 2% ÷ live): small, so
// idle instances leave the others within 2% of the limit, yet enough to
// pass a chunk until the next heartbeat gives a busy instance its share.
const FloorPercent = 2

// Bandwidth shares one app's bandwidth limit among the live instances.
// Create it with Cluster.Bandwidth; the Cluster's heartbeat updates it.
type Bandwidth struct {
	c   *Cluster
	app string
	key string
	lim *bandwidth.Limiter

	mu     sync.Mutex
	limit  int64 // bytes/s, cluster-wide
	share  int64 // bytes/s, this instance's, last set
	prev   bandwidth.Demand
	prevAt time.Time
	want   int64 // bytes/s, last published
}

// Bandwidth makes lim pace app's share of limit (bytes/s) from now on: at
// once limit ÷ live instances, then by demand from each heartbeat.
func (c *Cluster) Bandwidth(app string, lim *bandwidth.Limiter, limit int64) *Bandwidth {
	b := &Bandwidth{c: c, app: app, key: c.prefix + ":" + app + ":bw", lim: lim, limit: limit,
		prev: lim.Demand(), prevAt: c.clk.Now()}
	b.setShareLocked(evenShare(limit, c.Live()))
	c.mu.Lock()
	c.bws = append(c.bws, b)
	c.mu.Unlock()
	return b
}

// Limiter is the limiter b paces.
func (b *Bandwidth) Limiter() *bandwidth.Limiter { return b.lim }

// Share is this instance's share of the limit now, in bytes/s.
func (b *Bandwidth) Share() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.share
}

// Want is the demand last published, in bytes/s.
func (b *Bandwidth) Want() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.want
}

// SetLimit changes the cluster-wide limit (a reload, a strict fraction):
// the share scales with it until the next heartbeat.
func (b *Bandwidth) SetLimit(limit int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if limit == b.limit || limit <= 0 {
		return
	}
	sh := int64(float64(b.share) * float64(limit) / float64(b.limit))
	b.limit = limit
	b.setShareLocked(sh)
}

// Close stops sharing (the app is gone or has a new limiter); the demand it
// published expires after 3 heartbeats.
func (b *Bandwidth) Close() {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.bws {
		if x == b {
			c.bws = append(c.bws[:i], c.bws[i+1:]...)
			break
		}
	}
}

func (b *Bandwidth) setShareLocked(sh int64) {
	sh = max(1, min(sh, b.limit))
	b.share = sh
	b.lim.SetRate(sh)
}

// demandLocked is the bytes/s that asked to pass since the last heartbeat.
func (b *Bandwidth) demandLocked(now time.Time) int64 {
	d := b.lim.Demand()
	dt := now.Sub(b.prevAt)
	if dt <= 0 {
		dt = b.c.heartbeat
	}
	passed := max((d.Asked-d.Waiting)-(b.prev.Asked-b.prev.Waiting), 0)
	// Connections waiting, about: each has one ask queued (a chunk, or
	// what a reader read: the mean ask over the heartbeat), and the mean
	// queue holds, of each, from its whole ask (just asked) to none (its
	// turn comes): half an ask on average more than the asks of those
	// before it.
	ask := float64(b.lim.Chunk())
	if n := d.Asks - b.prev.Asks; n > 0 {
		ask = float64(d.Asked-b.prev.Asked) / float64(n)
	}
	var conns float64
	if q := (d.Queued - b.prev.Queued) / dt.Seconds(); q > 0 {
		conns = q/ask + 0.5
	}
	b.prev, b.prevAt = d, now
	w := float64(passed)/dt.Seconds() + conns*float64(b.limit)
	return int64(min(w, 1e15))
}

// beat publishes b's demand at now, reads the others' and sets the share;
// it reports false when Redis failed (the caller falls back).
func (b *Bandwidth) beat(now time.Time, ttl time.Duration) bool {
	b.mu.Lock()
	want := b.demandLocked(now)
	b.want = want
	b.mu.Unlock()
	res, err := call(b.c, func(ctx context.Context) ([]string, error) {
		return bwScript.Run(ctx, b.c.rdb, []string{b.key}, now.UnixMilli(), ttl.Milliseconds(), b.c.id, want).StringSlice()
	})
	if err != nil {
		b.c.failed(now, err)
		return false
	}
	demands := make(map[string]int64, len(res)/2+1)
	for i := 0; i+1 < len(res); i += 2 {
		if v, err := strconv.ParseInt(res[i+1], 10, 64); err == nil && v >= 0 {
			demands[res[i]] = v
		}
	}
	demands[b.c.id] = want
	b.mu.Lock()
	b.setShareLocked(demandShare(b.limit, b.c.id, demands, b.c.Live()))
	b.mu.Unlock()
	return true
}

// fallback paces to the fair share while Redis is unreachable.
func (b *Bandwidth) fallback(live int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setShareLocked(evenShare(b.limit, live))
}

func evenShare(limit int64, live int) int64 { return max(1, limit/int64(max(live, 1))) }

// demandShare is own's share of limit given every instance's demand: in
// proportion to demand, each at least the floor (FloorPercent of limit ÷
// the instances), summing to limit. A live instance that has published no
// demand yet (it has just started) keeps limit ÷ live, what it paces to
// until its first heartbeat, so that the shares never sum over the limit.
func demandShare(limit int64, own string, demands map[string]int64, live int) int64 {
	n := max(live, len(demands), 1)
	floor := float64(limit) * FloorPercent / 100 / float64(n)
	ids := make([]string, 0, len(demands))
	for id := range demands {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same order on every instance
	fixed := map[string]bool{}
	unknown := n - len(demands)
	rest := float64(limit) - float64(unknown)*float64(limit)/float64(n)
	// Water filling: an instance whose proportional part of what is left
	// is under the floor gets the floor, and the others share the rest.
	for {
		var total float64
		open := 0
		for _, id := range ids {
			if !fixed[id] {
				total += float64(demands[id])
				open++
			}
		}
		if open == 0 {
			return int64(floor)
		}
		part := func(id string) float64 {
			if total == 0 {
				return rest / float64(open)
			}
			return rest * float64(demands[id]) / total
		}
		changed := false
		for _, id := range ids {
			if !fixed[id] && part(id) < floor {
				fixed[id] = true
				rest -= floor
				changed = true
			}
		}
		if !changed {
			if fixed[own] {
				return int64(floor)
			}
			return int64(part(own))
		}
	}
}
