package acme

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/leveeproxy/levee/internal/catalog"
)

// Notes is where a Manager records that it wrote a certificate (issued
// or renewed), so that the other instances of a fleet load it: the
// catalog's change feed (catalog.Writer.NoteCertificates), which every
// instance follows (PostgreSQL's NOTIFY, else polling) and hands back
// to CertificatesWritten.
type Notes interface {
	NoteCertificates(ctx context.Context, hosts []string, now time.Time) error
}

// maxWritten bounds the names the feed told of and not yet loaded; past
// it a name is dropped (counted) and loaded at its next handshake or
// renewal, as without the feed.
const maxWritten = 10_000

// feedTimeout bounds a note's write and a told certificate's load.
const feedTimeout = 10 * time.Second

// Results of a name the feed told of, a metric label each.
const (
	fleetLoaded  = "loaded"  // in the cache now
	fleetDropped = "dropped" // the queue was full
	fleetFull    = "full"    // not cached here, and the cache is full
	fleetFailed  = "failed"  // the store could not give it
)

// written is the names the feed told of, waiting for the Manager's one
// loader goroutine: a set, so a name told twice is loaded once.
type written struct {
	mu    sync.Mutex
	names map[string]struct{}
	wake  chan struct{} // room for one: a send that finds it full is dropped
}

func newWritten() *written {
	return &written{names: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// CertificatesWritten is told, from the catalog's change feed, the names
// whose certificates an instance of the fleet (this one included) wrote
// to the store. Each is loaded into the cache in the background: a new
// certificate is served without waiting for a handshake to ask for it,
// and a renewed one replaces the old at once instead of at this
// instance's own renewal time. It never blocks (the feed's watcher calls
// it); eligibility is not asked again, the writer asked it.
func (m *Manager) CertificatesWritten(names []string) {
	w := m.written
	dropped := 0
	w.mu.Lock()
	for _, n := range names {
		n = catalog.CanonicalHost(n)
		if _, ok := w.names[n]; ok || n == "" {
			continue
		}
		if len(w.names) >= maxWritten {
			dropped++
			continue
		}
		w.names[n] = struct{}{}
	}
	w.mu.Unlock()
	if dropped > 0 {
		m.m.fleet.WithLabelValues(fleetDropped).Add(float64(dropped))
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loadWritten loads the names the feed told of, one at a time, until
// Close: one goroutine, however many names.
func (m *Manager) loadWritten() {
	w := m.written
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-w.wake:
		}
		w.mu.Lock()
		names := w.names
		w.names = map[string]struct{}{}
		w.mu.Unlock()
		for name := range names {
			if m.ctx.Err() != nil {
				return
			}
			m.m.fleet.WithLabelValues(m.loadOne(name)).Inc()
		}
	}
}

// loadOne puts name's stored certificate in the cache, in place of the
// ones it replaces, and hands it to the handshakes waiting for name's
// issuance here (which may be waiting for the lease of the instance
// that issued it).
func (m *Manager) loadOne(name string) string {
	ctx, cancel := context.WithTimeout(m.ctx, feedTimeout)
	defer cancel()
	old := m.cache.AllMatchingCertificates(name)
	m.mu.Lock()
	full := len(old) == 0 && len(m.held) >= CacheCapacity
	m.mu.Unlock()
	if full {
		return fleetFull
	}
	if _, err := m.magic.Load().CacheManagedCertificate(ctx, name); err != nil {
		m.o.Logger.Debug("acme: a certificate the feed told of did not load", "name", name, "err", err)
		return fleetFailed
	}
	fresh := m.swapIn(name, old)
	m.mu.Lock()
	f := m.flying[name]
	m.mu.Unlock()
	if f != nil && fresh != nil {
		f.finish(fresh)
	}
	return fleetLoaded
}

// swapIn removes from the cache the certificates of old that are not
// name's newest, now cached, and returns that newest (nil for none): a
// handshake always finds one of them, never none.
func (m *Manager) swapIn(name string, old []certmagic.Certificate) *tls.Certificate {
	fresh := m.cached(name)
	var stale []string
	for _, c := range old {
		if fresh == nil || c.Leaf == nil || !c.Leaf.Equal(fresh.Leaf) {
			stale = append(stale, c.Hash())
		}
	}
	m.cache.Remove(stale)
	return fresh
}

// announce notes in the catalog's change feed that name's certificate
// was written, for the other instances. A note that fails costs them
// only time: they load it at its next handshake or renewal.
func (m *Manager) announce(name string) {
	if m.o.Notes == nil || name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, feedTimeout)
	defer cancel()
	if err := m.o.Notes.NoteCertificates(ctx, []string{name}, m.o.Clock.Now()); err != nil && ctx.Err() == nil {
		m.o.Logger.Warn("acme: cannot tell the fleet of a new certificate; the others load it at its next handshake",
			"name", name, "err", err)
	}
}
