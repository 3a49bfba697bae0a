package catalog

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// changesPerPoll bounds the changes read by one query of Poll.
const changesPerPoll = 10_000

// pollTimeout bounds one poll of the watcher (or Watch, when longer): a
// store that stopped answering delays changes, never stops the watcher.
const pollTimeout = 10 * time.Second

// Notifier is a Store that can say, sooner than the next poll, that
// changes may be waiting (PostgreSQL's LISTEN/NOTIFY).
type Notifier interface {
	// Listen sends on wake, without blocking (wake has room for one; a
	// send that finds it full is dropped), whenever changes may have been
	// written, until ctx ends; then it returns. A notice is a hint, and may
	// be lost: the watcher's periodic poll still finds every change.
	Listen(ctx context.Context, wake chan<- struct{})
}

// Run follows the store's changes, polling every Watch and, when the store
// is a Notifier, whenever it says changes may be waiting, until ctx ends;
// it returns once its listener has. It starts from the store's current
// version: the cache starts empty.
func (l *Lazy[V]) Run(ctx context.Context) {
	if v, err := l.versionOf(ctx); err == nil {
		l.version.Store(v)
	} else {
		l.o.Logger.Warn("catalog: cannot read the store's version; watching from the start", "err", err)
	}
	var wake chan struct{} // nil: the store only polls
	if n, ok := l.o.Store.(Notifier); ok {
		wake = make(chan struct{}, 1)
		lctx, stop := context.WithCancel(ctx)
		var listener sync.WaitGroup
		listener.Go(func() { n.Listen(lctx, wake) })
		defer listener.Wait()
		defer stop()
	}
	for {
		t := l.o.Clock.NewTimer(l.o.Watch)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-wake:
			t.Stop()
		}
		pctx, cancel := context.WithTimeout(ctx, max(pollTimeout, l.o.Watch))
		_, err := l.Poll(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			l.o.Logger.Warn("catalog: reading changes failed; retrying", "err", err)
		}
	}
}

func (l *Lazy[V]) versionOf(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, max(pollTimeout, l.o.Watch))
	defer cancel()
	return l.o.Store.Version(ctx)
}

// Poll applies the changes made since the last one applied and returns how
// many it read. A change to a cached app is applied in place (its new
// config composed and swapped in) when its hosts and paths are the same;
// otherwise the hosts it used or claims are dropped from the cache, to be
// loaded again on their next request. Each host is dropped under its own
// shard's lock only, so lookups of other hosts go on.
func (l *Lazy[V]) Poll(ctx context.Context) (int, error) {
	total := 0
	for {
		chs, err := l.o.Store.Changes(ctx, l.version.Load(), changesPerPoll)
		if errors.Is(err, ErrChangesLost) {
			l.o.Logger.Warn("catalog: missed changes were pruned; forgetting every cached host")
			v, verr := l.o.Store.Version(ctx)
			if verr != nil {
				return total, verr
			}
			l.flush()
			l.version.Store(v)
			continue
		}
		if err != nil || len(chs) == 0 {
			return total, err
		}
		if err := l.apply(ctx, chs); err != nil {
			return total, err
		}
		last := chs[len(chs)-1]
		l.version.Store(last.Version)
		l.o.Metrics.applied(len(chs), l.o.Clock.Now().Sub(last.At))
		total += len(chs)
		if len(chs) < changesPerPoll {
			return total, nil
		}
	}
}

func (l *Lazy[V]) apply(ctx context.Context, chs []Change) error {
	latest := map[string]Change{}
	var certs []string
	for _, c := range chs {
		if c.Certificate() {
			certs = append(certs, c.Hosts...)
			continue
		}
		latest[c.App] = c
	}
	if fn := l.certs.Load(); fn != nil && len(certs) > 0 {
		// Told before the apps' changes are read: a failed read below
		// tells them again at the next poll, which loading allows.
		(*fn)(certs)
	}
	var cached []string
	var drop []string // hosts (exact or wildcard) to drop from the caches
	l.appsMu.Lock()
	for name, c := range latest {
		if l.apps[name] != nil {
			cached = append(cached, name)
		} else {
			drop = append(drop, c.Hosts...)
		}
	}
	l.appsMu.Unlock()
	var recs []Record
	if len(cached) > 0 {
		var err error
		if recs, err = l.o.Store.Apps(ctx, cached); err != nil {
			return err
		}
	}
	byName := make(map[string]Record, len(recs))
	for _, r := range recs {
		byName[r.Name] = r
	}
	for _, name := range cached {
		r, ok := byName[name]
		l.appsMu.Lock()
		ref := l.apps[name]
		var old Record
		var keys []string
		if ref != nil {
			old, keys = ref.rec, slices.Clone(ref.keys)
		}
		l.appsMu.Unlock()
		switch {
		case ref == nil: // evicted meanwhile: only its new hosts matter
			drop = append(drop, latest[name].Hosts...)
		case !ok: // deleted
			drop = append(append(drop, old.Hosts...), keys...)
		case r.Version <= old.Version:
		case sameRoutes(old, r):
			l.update(r, false)
		default:
			drop = append(append(append(drop, old.Hosts...), keys...), r.Hosts...)
		}
	}
	l.dropHosts(drop)
	return nil
}

// update composes r again and swaps it in for the cached app of its name,
// if r is newer (or force) and the app is still cached.
func (l *Lazy[V]) update(r Record, force bool) {
	v, err := l.o.Compose(r)
	if err != nil {
		l.o.Logger.Warn("catalog: changed app skipped; its hosts are dropped", "app", r.Name, "err", err)
		l.o.Metrics.composeFailed()
		l.appsMu.Lock()
		var keys []string
		if ref := l.apps[r.Name]; ref != nil {
			keys = slices.Clone(ref.keys)
		}
		l.appsMu.Unlock()
		l.dropHosts(keys)
		return
	}
	drop := &v
	l.appsMu.Lock()
	if ref := l.apps[r.Name]; ref != nil && (force || ref.rec.Version < r.Version) {
		drop = ref.val.Swap(&v)
		ref.rec = r
	}
	l.appsMu.Unlock()
	l.o.Release(*drop)
}

func sameRoutes(a, b Record) bool {
	return slices.Equal(sorted(a.Hosts), sorted(b.Hosts)) && slices.Equal(sorted(a.Paths), sorted(b.Paths))
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	for i := range out {
		out[i] = strings.ToLower(out[i])
	}
	slices.Sort(out)
	return out
}

// dropHosts removes hosts from both caches: exact names from their own
// shard; a wildcard (*.example.com) from every shard, every host below it.
func (l *Lazy[V]) dropHosts(hosts []string) {
	var suffixes []string
	var removed []*sieveNode[hostEntry[V]]
	for _, h := range hosts {
		h = strings.ToLower(h)
		if strings.HasPrefix(h, "*.") {
			suffixes = append(suffixes, h[1:])
			continue
		}
		if n := l.hosts.shard(h).remove(h); n != nil {
			removed = append(removed, n)
		}
		l.unknown.shard(h).remove(h)
	}
	if len(suffixes) > 0 {
		below := func(k string) bool {
			return slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(k, s) })
		}
		for i := range l.hosts.shards {
			removed = append(removed, l.hosts.shards[i].removeIf(below)...)
			l.unknown.shards[i].removeIf(below)
		}
	}
	l.release(removed)
}

// flush forgets every cached host.
func (l *Lazy[V]) flush() {
	var removed []*sieveNode[hostEntry[V]]
	all := func(string) bool { return true }
	for i := range l.hosts.shards {
		removed = append(removed, l.hosts.shards[i].removeIf(all)...)
		l.unknown.shards[i].removeIf(all)
	}
	l.release(removed)
}

// release settles removed cache nodes: their apps lose a host, and apps
// left without one are released.
func (l *Lazy[V]) release(removed []*sieveNode[hostEntry[V]]) {
	if len(removed) == 0 {
		return
	}
	var free []V
	l.appsMu.Lock()
	for _, n := range removed {
		free = l.dropKeyLocked(n.key, &n.val, free)
	}
	l.appsMu.Unlock()
	for _, v := range free {
		l.o.Release(v)
	}
}
