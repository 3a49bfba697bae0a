// Package acme obtains and renews apps' certificates from an ACME CA
// (tls.acme), on certmagic, for the names levee serves and no others:
// a name is ordered only when an app claims it with `tls: acme`, and only
// within budgets that mirror the CA's rate limits. Certificates and keys
// are kept, the keys encrypted, in the catalog store (storage.go).
package acme

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// StoredApp finds the catalog app claiming host (exactly or by a wildcard
// covering it): its hosts and its tls (nil: none), ok false for none. An
// error is the catalog's (busy, unavailable, ctx ended).
type StoredApp func(ctx context.Context, host string) (hosts []string, tls *config.AppTLS, ok bool, err error)

// claims is the config file's apps by host pattern; immutable once built.
type claims map[string]*config.App

func newClaims(cfg *config.Config) claims {
	c := claims{}
	for _, name := range cfg.AppNames() {
		for _, h := range cfg.Apps[name].Hosts {
			if h = catalog.CanonicalHost(h); c[h] == nil {
				c[h] = cfg.Apps[name]
			}
		}
	}
	return c
}

// lookup is the app claiming host, exactly or by the most specific
// wildcard, and the pattern that matched.
func (c claims) lookup(host string) (*config.App, string) {
	if a := c[host]; a != nil {
		return a, host
	}
	for _, w := range catalog.WildcardsOf(host) {
		if a := c[w]; a != nil {
			return a, w
		}
	}
	return nil, ""
}

// errNotEligible refuses a name no app claims with acme on. It carries no
// name: it is counted, never logged per attempt.
var errNotEligible = errors.New("acme: no app claims this name with tls: acme")

// eligible reports whether a certificate may be obtained for host: an app
// of the config file or of the catalog claims it, exactly or (with
// wildcard_subdomains) by a wildcard, and that app wants ACME. The config
// file's apps win, as they do for routing. claimed says some app claims
// host at all (a name with its own or the listener's certificate is
// not an unknown one).
func eligible(ctx context.Context, acfg *config.ACME, file claims, stored StoredApp, host string) (ok, claimed bool, err error) {
	if !qualifies(host) {
		return false, false, nil
	}
	app, pattern := file.lookup(host)
	found := app != nil
	var appTLS *config.AppTLS
	if found {
		appTLS = app.TLS
	} else if stored != nil {
		hosts, t, ok, err := stored(ctx, host)
		if err != nil {
			return false, false, err
		}
		if found, appTLS = ok, t; ok {
			pattern = "*" // a stored app's pattern: exact only if it lists host
			if slices.ContainsFunc(hosts, func(h string) bool { return catalog.CanonicalHost(h) == host }) {
				pattern = host
			}
		}
	}
	if !found || !acfg.Wants(appTLS) {
		return false, found, nil
	}
	return pattern == host || acfg.WildcardSubdomains, true, nil
}

// qualifies rules out names no public CA issues for: IP addresses,
// single labels (localhost), wildcards and names with odd characters.
func qualifies(host string) bool {
	if host == "" || len(host) > 253 || !strings.Contains(host, ".") || strings.HasPrefix(host, ".") {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return !strings.Contains(host, "..")
}
