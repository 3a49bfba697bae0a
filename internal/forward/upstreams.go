package forward

import (
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/observe"
)

// Upstreams are the connection pools to backends, shared by every app with
// a backend at the same address under the same upstream settings: one
// pool per address and settings, both engines', so
// upstream.max_conns_per_backend and max_idle_per_backend bound the
// connections to a backend address across all the apps that use it (what
// the backend can take), and an app composed on a known backend builds no
// client. The per-app backend state (in flight, latency, health) stays in
// each app's Pool.
//
// An app takes the pool of each backend with Acquire and gives it back
// with Release once no route of its uses it; the last Release closes the
// pool's idle connections (those in use finish their requests, then
// close). The zero
// value is ready to use; it is safe for concurrent use and starts nothing.
type Upstreams struct {
	// Unclean counts the backend connections closed after an exchange
	// that did not end cleanly, on every pool (set its Log before the
	// first Acquire).
	Unclean Unclean

	mu    sync.Mutex
	pools map[upstreamKey]*Upstream
}

type upstreamKey struct {
	addr     string
	settings config.Upstream
	leg      config.Leg // its TLS files' names and contents: a rotation makes new pools
}

// Upstream is the connection pool of one backend address under one set of
// upstream settings and one protocol: Fast, with levee's exchange on each
// connection, for both engines (HTTP/1.1), or h2 (HTTP/2, h2c or h2).
type Upstream struct {
	key     upstreamKey
	refs    int // guarded by Upstreams.mu
	Fast    *fasthttp.HostClient
	watches *watches    // the net/http engine's requests in flight on Fast
	dialer  *fastDialer // the pool's stats and dial budget
	conns   *h1Pool     // Fast's connections
	h2      *h2Leg      // nil: HTTP/1.1 (Fast)
}

// do sends out to the pool's backend and reads the response head into
// resp, on the pool's leg: HTTP/1.1 or HTTP/2.
func (p *Upstream) do(out *fasthttp.Request, resp *fasthttp.Response, call legCall) error {
	if p.h2 != nil {
		return p.h2.do(out, resp, call)
	}
	if call.sent != nil {
		return call.sent.read(p.Fast, out, resp)
	}
	if call.watched == nil {
		return p.Fast.Do(out, resp)
	}
	p.watches.add(out, call.watched)
	err := p.Fast.Do(out, resp)
	p.watches.remove(out)
	return err
}

// Addr is the pool's backend address.
func (p *Upstream) Addr() string { return p.key.addr }

// Counts are the pool's connection stats now.
func (p *Upstream) Counts() observe.ConnCounts { return p.dialer.stats.Counts() }

// Acquire returns the HTTP/1.1 pool of backend addr under settings u (see
// AcquireLeg).
func (us *Upstreams) Acquire(addr string, u config.Upstream) *Upstream {
	return us.AcquireLeg(addr, u, config.AppUpstream{Protocol: config.ProtocolHTTP1})
}

// AcquireLeg returns the pool of backend addr under settings u, spoken to
// as app says (its protocol and TLS, validated), made on its first use,
// and counts one more user of it.
func (us *Upstreams) AcquireLeg(addr string, u config.Upstream, app config.AppUpstream) *Upstream {
	k := upstreamKey{addr, u, app.Leg()}
	us.mu.Lock()
	defer us.mu.Unlock()
	p := us.pools[k]
	if p == nil {
		if us.pools == nil {
			us.pools = map[upstreamKey]*Upstream{}
		}
		w := new(watches)
		p = &Upstream{key: k, watches: w}
		p.Fast, p.dialer, p.conns = newFastClient(addr, u, &us.Unclean, w)
		if app.HTTP2() {
			p.h2 = newH2Leg(addr, u, app, p.dialer)
		}
		us.pools[k] = p
	}
	p.refs++
	return p
}

// Release gives back one use of p taken by Acquire; the last one forgets
// the pool and closes its idle connections, and its HTTP/1.1 connections
// in use as their requests end. A later Acquire of the same address makes
// a new pool.
func (us *Upstreams) Release(p *Upstream) {
	us.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(us.pools, p.key)
	} else if p.refs < 0 {
		us.mu.Unlock()
		panic("forward: an upstream pool released more often than acquired")
	}
	us.mu.Unlock()
	if last {
		p.closeIdle(true)
	}
}

// Each calls f with each pool in use (under a lock: f must not call us).
func (us *Upstreams) Each(f func(*Upstream)) {
	us.mu.Lock()
	defer us.mu.Unlock()
	for _, p := range us.pools {
		f(p)
	}
}

// Len is the number of pools in use.
func (us *Upstreams) Len() int {
	us.mu.Lock()
	defer us.mu.Unlock()
	return len(us.pools)
}

// CloseIdle closes the idle connections of every pool (at shutdown).
func (us *Upstreams) CloseIdle() {
	us.mu.Lock()
	pools := make([]*Upstream, 0, len(us.pools))
	for _, p := range us.pools {
		pools = append(pools, p)
	}
	us.mu.Unlock()
	for _, p := range pools {
		p.CloseIdle()
	}
}

// CloseIdle closes the pool's idle connections.
func (p *Upstream) CloseIdle() { p.closeIdle(false) }

// closeIdle closes the pool's idle connections, and if retire, its
// HTTP/1.1 connections in use as their requests end.
func (p *Upstream) closeIdle(retire bool) {
	p.conns.close(retire)
	if p.h2 != nil {
		p.h2.closeIdle()
	}
}
