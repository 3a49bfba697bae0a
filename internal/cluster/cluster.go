// Package cluster makes rate limits cluster-wide: the GCRA state of every key
// lives in Redis (one node, or a Redis Cluster, through go-redis's universal
// client), so the configured rate is the total admitted by all instances.
//
// # Leases
//
// A round trip per request would cost every request a network wait, so an
// instance takes small slices of a key's budget: one atomic Lua script admits
// up to a lease's worth of units under the key's GCRA, counting them in Redis
// at once, and the instance spends them locally, one request at a time. When
// its slice runs low it takes the next one in the background; when a key has
// been idle for a heartbeat it gives the rest back. So the cluster-wide total
// is still exactly GCRA's (every admitted unit was counted in Redis), the
// common request decides in-process, and the slack of any window is at most
// one lease per instance: admitted ≤ burst + rate·W + instances·lease.
//
// When Redis has no unit for a key (the limit is saturated), the script says
// how long until a whole lease will conform, and the instance refuses locally
// until then: a saturated limit costs about (instances / lease) round trips
// per admitted request, not one per offered request.
//
// # Failure
//
// Every Redis call has a deadline (Options.Timeout), and a decision waits
// for one call at most: decisions on a key whose take is in flight wait for
// that take, and find the cluster degraded when it fails. So a Redis that
// accepts and never answers costs a request at most Timeout. When a call
// fails, the cluster is degraded: each instance enforces its fair share of each limit in
// process (rate ÷ live instances, burst ÷ live instances, from the heartbeats
// the instances keep in Redis), spending first the units it already holds,
// and logs the change once. A heartbeat probes Redis; when it answers, limits
// are cluster-wide again. levee_cluster_degraded is 1 in between.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/redis/go-redis/v9"
)

// Options configure a Cluster.
type Options struct {
	// Addrs are Redis addresses: host:port, or an absolute path for a unix
	// socket. Several addresses mean a Redis Cluster.
	Addrs    []string
	Username string
	Password string
	DB       int // single node only
	// Timeout bounds every Redis call, dial included; 0 means DefaultTimeout.
	Timeout time.Duration
	// Lease is the slice of a limit's budget an instance takes at once, as
	// time at the limit's rate (10ms of 1000/s is 10 requests); at least one
	// unit, at most half the burst. 0 means DefaultLease.
	Lease time.Duration
	// Heartbeat is how often the instance marks itself live, gives back
	// idle leases and, when degraded, probes Redis; 0 means DefaultHeartbeat.
	// An instance missing for 3 heartbeats no longer counts as live.
	Heartbeat time.Duration
	// Prefix starts every key; "" means "levee".
	Prefix string
	// Instance names this instance in the live set; "" means host-pid-random.
	Instance string
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Defaults.
const (
	DefaultTimeout   = 50 * time.Millisecond
	DefaultLease     = 10 * time.Millisecond
	DefaultHeartbeat = time.Second
	DefaultPrefix    = "levee"
)

// Cluster is one instance's connection to the shared limit state. Create it
// with New, run its heartbeat with Run (or call Tick), and Close it.
type Cluster struct {
	rdb       redis.UniversalClient
	timeout   time.Duration
	lease     time.Duration
	heartbeat time.Duration
	prefix    string
	id        string
	clk       clock.Clock
	log       *slog.Logger

	degraded atomic.Bool
	stateMu  sync.Mutex // serialises degraded changes and their log lines
	// probeAt (µs since the epoch, on the decisions' clock): while degraded,
	// the first decision at or after it asks Redis again, so a short outage
	// (or one slow call) costs a fair-share window of probeGap, not of a
	// heartbeat.
	probeAt    atomic.Int64
	probeGap   time.Duration
	live       atomic.Int64
	roundTrips atomic.Uint64
	failures   atomic.Uint64

	mu     sync.Mutex
	stores []*Store
	bws    []*Bandwidth
	closed bool
	fetchs sync.WaitGroup // background lease takes and gives
}

// New connects lazily (no call is made until the first decision or Tick).
func New(o Options) (*Cluster, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("cluster: no redis address")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Instance == "" {
		host, _ := os.Hostname()
		o.Instance = fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// go-redis logs every failed dial; the cluster logs one line per state change.
	quietRedis.Do(func() { redis.SetLogger(nopLogger{}) })
	dialer := &net.Dialer{Timeout: o.Timeout}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:    o.Addrs,
		Username: o.Username,
		Password: o.Password,
		DB:       o.DB,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if strings.HasPrefix(addr, "/") {
				network = "unix"
			}
			return dialer.DialContext(ctx, network, addr)
		},
		DialTimeout:  o.Timeout,
		ReadTimeout:  o.Timeout,
		WriteTimeout: o.Timeout,
		// The per-call context deadline is the bound; a pool wait is part of it.
		ContextTimeoutEnabled: true,
		PoolTimeout:           o.Timeout,
		MaxRetries:            -1, // a retry would double the deadline; the caller falls back instead
		DialerRetries:         1,
		DialerRetryTimeout:    o.Timeout / 10,
		DisableIdentity:       true,
	})
	c := &Cluster{rdb: rdb, timeout: o.Timeout, lease: o.Lease, heartbeat: o.Heartbeat,
		prefix: o.Prefix, id: o.Instance, clk: o.Clock, log: o.Logger,
		probeGap: min(max(2*o.Timeout, 100*time.Millisecond), o.Heartbeat)}
	c.live.Store(1)
	return c, nil
}

// Degraded reports whether Redis is unreachable and limits are local shares.
func (c *Cluster) Degraded() bool { return c.degraded.Load() }

// Live is the number of live instances last learned from Redis (at least 1).
func (c *Cluster) Live() int { return int(c.live.Load()) }

// RoundTrips is the number of Redis calls made so far.
func (c *Cluster) RoundTrips() uint64 { return c.roundTrips.Load() }

// Failures is the number of Redis calls that failed so far.
func (c *Cluster) Failures() uint64 { return c.failures.Load() }

// Run beats every Heartbeat until ctx ends. One Run per Cluster.
func (c *Cluster) Run(ctx context.Context) {
	c.Tick(c.clk.Now())
	for {
		t := c.clk.NewTimer(c.heartbeat)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			c.Tick(c.clk.Now())
		}
	}
}

// Tick is one heartbeat at now: mark this instance live and learn how many
// are, leave degraded mode if Redis answers, give back idle leases and
// share each bandwidth limit by demand (see Bandwidth).
func (c *Cluster) Tick(now time.Time) {
	ttl := 3 * c.heartbeat
	n, err := call(c, func(ctx context.Context) (int64, error) {
		return beatScript.Run(ctx, c.rdb, []string{c.prefix + ":instances"},
			now.UnixMilli(), ttl.Milliseconds(), c.id).Int64()
	})
	c.mu.Lock()
	stores := append([]*Store(nil), c.stores...)
	bws := append([]*Bandwidth(nil), c.bws...)
	c.mu.Unlock()
	if err != nil {
		c.failed(now, err)
		for _, b := range bws {
			b.fallback(c.Live())
		}
		return
	}
	c.live.Store(max(n, 1))
	c.setDegraded(false, nil)
	for _, s := range stores {
		s.giveIdle(now, now.Add(-c.heartbeat))
	}
	for i, b := range bws {
		if !b.beat(now, ttl) {
			for _, b := range bws[i:] {
				b.fallback(c.Live())
			}
			return
		}
	}
}

// Close gives back every lease it can, leaves the live set, waits for
// background calls and closes the connections.
func (c *Cluster) Close() error {
	c.mu.Lock()
	c.closed = true
	stores := c.stores
	c.mu.Unlock()
	c.fetchs.Wait()
	now := c.clk.Now()
	if !c.Degraded() {
		for _, s := range stores {
			s.giveIdle(now, now.Add(time.Hour)) // every held lease
		}
		_, _ = call(c, func(ctx context.Context) (int64, error) {
			return c.rdb.ZRem(ctx, c.prefix+":instances", c.id).Result()
		})
	}
	return c.rdb.Close()
}

// call runs one Redis call under the deadline, counting it.
func call[T any](c *Cluster, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.roundTrips.Add(1)
	v, err := f(ctx)
	if err != nil {
		c.failures.Add(1)
	}
	return v, err
}

// failed records a failed call at now: degraded, probing again after probeGap.
func (c *Cluster) failed(now time.Time, err error) {
	c.probeAt.Store(now.Add(c.probeGap).UnixMicro())
	c.setDegraded(true, err)
}

// probe reports whether a decision at us, while degraded, should ask Redis
// again; one decision per probeGap does.
func (c *Cluster) probe(us int64) bool {
	at := c.probeAt.Load()
	return us >= at && c.probeAt.CompareAndSwap(at, us+c.probeGap.Microseconds())
}

// setDegraded changes the state and logs once per change.
func (c *Cluster) setDegraded(on bool, err error) {
	if c.degraded.Load() == on {
		return
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.degraded.Load() == on {
		return
	}
	c.degraded.Store(on)
	if on {
		c.log.Warn("cluster: redis unreachable; enforcing this instance's fair share of each limit",
			"error", err, "live_instances", c.Live())
	} else {
		c.log.Info("cluster: redis reachable again; limits are cluster-wide", "live_instances", c.Live())
	}
}

// goBackground runs f as a background call the Cluster owns (Close waits
// for it); it reports false, running nothing, once the Cluster is closed.
func (c *Cluster) goBackground(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.fetchs.Go(f)
	return true
}

var quietRedis sync.Once

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}
