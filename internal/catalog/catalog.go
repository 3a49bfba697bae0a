// Package catalog maps a request's host and path to the app that claims it.
//
// An Index is immutable once built, so lookups take no lock at all; a config
// reload builds a new Index and swaps it in whole (see server). Large
// catalogs (millions of apps, loaded lazily from SQLite or PostgreSQL) implement the same
// Catalog interface, so the request path does not change with the store.
package catalog

import (
	"slices"
	"strings"

	"github.com/leveeproxy/levee/internal/urlpath"
)

// Catalog finds the value (the composed route of an app) for a request.
// Implementations must be safe for concurrent use and must not block on I/O
// without a deadline.
type Catalog[V any] interface {
	Lookup(host, path string) (V, bool)
}

// Entry is one app's claim: every host × path pair routes to Value.
type Entry[V any] struct {
	// Hosts are exact names ("example.com") or wildcards ("*.example.com",
	// matching any name below example.com, but not example.com itself).
	Hosts []string
	// Paths are prefixes matched on segment boundaries: "/api" matches
	// "/api" and "/api/x", not "/apix". "/" matches everything.
	Paths []string
	Value V
}

// Index is an immutable host/path lookup table. The zero value finds nothing.
type Index[V any] struct {
	exact    map[string][]route[V] // host → routes, longest path first
	wildcard map[string][]route[V] // ".example.com" → routes, longest path first
}

type route[V any] struct {
	prefix string
	value  V
}

var _ Catalog[int] = (*Index[int])(nil)

// Build returns an Index over entries. Callers validate entries first (the
// config does); on a duplicate host and path the first entry wins.
func Build[V any](entries []Entry[V]) *Index[V] {
	ix := &Index[V]{exact: map[string][]route[V]{}, wildcard: map[string][]route[V]{}}
	for _, e := range entries {
		for _, h := range e.Hosts {
			h = strings.ToLower(strings.TrimSuffix(h, "."))
			m, key := ix.exact, h
			if strings.HasPrefix(h, "*.") {
				m, key = ix.wildcard, h[1:] // keep the dot: ".example.com"
			}
			for _, p := range e.Paths {
				if !slices.ContainsFunc(m[key], func(r route[V]) bool { return r.prefix == p }) {
					m[key] = append(m[key], route[V]{prefix: p, value: e.Value})
				}
			}
		}
	}
	for _, m := range []map[string][]route[V]{ix.exact, ix.wildcard} {
		for _, rs := range m {
			slices.SortStableFunc(rs, func(a, b route[V]) int { return len(b.prefix) - len(a.prefix) })
		}
	}
	return ix
}

// Lookup returns the value for host (as sent in the Host header, port and
// letter case allowed) and path. An exact host beats a wildcard; among
// wildcards the longest suffix wins; within a host the longest path prefix.
func (ix *Index[V]) Lookup(host, path string) (V, bool) {
	var zero V
	if ix == nil {
		return zero, false
	}
	host = canonicalHost(host)
	if rs, ok := ix.exact[host]; ok {
		if v, ok := matchPath(rs, path); ok {
			return v, true
		}
	}
	for i := 0; i < len(host); i++ {
		if host[i] != '.' {
			continue
		}
		if rs, ok := ix.wildcard[host[i:]]; ok {
			if v, ok := matchPath(rs, path); ok {
				return v, true
			}
		}
	}
	return zero, false
}

func matchPath[V any](rs []route[V], path string) (V, bool) {
	for _, r := range rs {
		if urlpath.HasPrefix(path, r.prefix) {
			return r.value, true
		}
	}
	var zero V
	return zero, false
}

// canonicalHost strips a port and a trailing dot and lowercases, without
// allocating when the host is already lower case.
func canonicalHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
			h = h[:i]
		}
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}
