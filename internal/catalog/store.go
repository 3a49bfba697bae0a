package catalog

import (
	"context"
	"errors"
	"time"
)

// Record is one app as a Store holds it: its name, its config as written
// (JSON, the form of apps.NAME in the config file) and the hosts and path
// prefixes it claims (every host × path pair).
type Record struct {
	Name   string
	Config []byte
	// Version is the store's change version of the app's last write: a
	// different Version means a different config.
	Version int64
	Hosts   []string
	Paths   []string
}

// Change says that an app was added, changed or deleted at Version.
type Change struct {
	Version int64
	App     string
	// Hosts are the app's hosts after the change (none after a delete).
	Hosts []string
	// At is when the change was written, for the update lag.
	At time.Time
}

// CertificateApp is the app of a change that says certificates were
// written (issued or renewed) for its Hosts, not that an app changed: no
// app can have this name ('@' is not allowed in one). Such a change rides
// the catalog's change feed so that every instance of a fleet loads the
// new certificate (LazyOptions.Certificates); a levee that does not know
// it takes it for an app that claims nothing and only drops its hosts
// from the cache.
const CertificateApp = "@certificate"

// Certificate says c notes certificates written for c.Hosts.
func (c Change) Certificate() bool { return c.App == CertificateApp }

// Store is where a Lazy catalog loads apps from. Every method honours ctx.
type Store interface {
	// ForHost returns the apps claiming host (canonical: lower case, no
	// port) exactly or by a wildcard covering it; none is not an error.
	ForHost(ctx context.Context, host string) ([]Record, error)
	// Apps returns the named apps that exist, in any order.
	Apps(ctx context.Context, names []string) ([]Record, error)
	// Changes returns up to limit changes after version, oldest first. It
	// returns ErrChangesLost when changes after version were pruned.
	Changes(ctx context.Context, after int64, limit int) ([]Change, error)
	// Version is the version of the latest change (0 for none).
	Version(ctx context.Context) (int64, error)
}

// ErrChangesLost says a watcher fell so far behind that the changes it
// had not seen were pruned: it must forget everything it cached.
var ErrChangesLost = errors.New("catalog: changes were pruned before they were read")

// WildcardsOf returns the wildcard host patterns that cover host, longest
// (most specific) first: a.b.example.com → *.b.example.com, *.example.com, *.com.
func WildcardsOf(host string) []string {
	var out []string
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			out = append(out, "*"+host[i:])
		}
	}
	return out
}

// CanonicalHost is host as the catalog keys it: no port, no trailing dot,
// lower case.
func CanonicalHost(host string) string { return canonicalHost(host) }
