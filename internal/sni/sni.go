// Package sni chooses the certificate a TLS handshake gets, by the host
// its client names (SNI). A name ACME manages (tls.acme) gets ACME's. An
// app's own certificate (apps.NAME.tls) is served, on every TLS listener,
// to a client that names one of the app's hosts; every other handshake
// gets the listener's. The config file's apps' certificates are loaded
// with the config and looked up in a Table; a stored app's are loaded
// with the app, through the catalog's bounded loader and cache, so a wave
// of handshakes for cold hosts waits on the loader exactly as their
// requests would, never on hot hosts.
package sni

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/reply"
)

// Table maps every host pattern (exact and wildcard) of the config file's
// apps to its certificate, nil for the listener's; immutable once built.
// A host it knows is never looked for in the catalog.
type Table map[string]*tls.Certificate

// NewTable collects the certificates of cfg's apps, which must have passed
// Validate; if several apps claim a host, the first by name with a
// certificate serves it.
func NewTable(cfg *config.Config) Table {
	t := Table{}
	for _, name := range cfg.AppNames() {
		ac := cfg.Apps[name]
		var c *tls.Certificate
		if ac.TLS != nil {
			var err error
			if c, err = ac.TLS.Certificate(); err != nil { // validated config: a broken invariant
				panic(fmt.Sprintf("sni: apps.%s.tls: %v", name, err))
			}
		}
		for _, h := range ac.Hosts {
			h = catalog.CanonicalHost(h)
			if t[h] == nil {
				t[h] = c
			}
		}
	}
	return t
}

// lookup is host's certificate, by its exact name and then the wildcard
// patterns covering it, most specific first; ok false for a host no app
// of the config file claims.
func (t Table) lookup(host string) (c *tls.Certificate, ok bool) {
	if c, ok = t[host]; ok {
		return c, true
	}
	for _, w := range catalog.WildcardsOf(host) {
		if c, ok = t[w]; ok {
			return c, true
		}
	}
	return nil, false
}

// Cert is what a stored app's route keeps for the handshakes of its
// hosts: the app's hosts and tls, for its certificate and ACME's
// eligibility. Not the app's config: every stored app would keep all of
// it alive (some 650 B) for these two fields.
type Cert struct {
	hosts []string
	tls   *config.AppTLS // nil: the listener's certificate
}

// NewCert is ac's certificate, as validation loaded it; one that did not
// load fails the handshakes of its hosts (Chooser.Certificate).
func NewCert(ac *config.App) Cert { return Cert{hosts: ac.Hosts, tls: ac.TLS} }

// certificate is c's certificate, nil for the listener's, or why a stored
// one did not load.
func (c *Cert) certificate() (*tls.Certificate, error) {
	if c.tls == nil {
		return nil, nil
	}
	return c.tls.Certificate()
}

// errNoCertificate fails the handshake of a host whose stored certificate
// does not load: serving the listener's instead would present a
// certificate for some other name.
var errNoCertificate = errors.New("levee: this host's certificate does not load")

// ACME is the certificates tls.acme manages (*acme.Manager): ours false
// for a name that is not ACME's.
type ACME interface {
	Certificate(hello *tls.ClientHelloInfo) (c *tls.Certificate, ours bool, err error)
}

// Options are a Chooser's sources, fixed for its life.
type Options struct {
	ACME ACME // nil: tls.acme is off
	// Table is the config file's apps' certificates in force now.
	Table func() Table
	// Stored loads the catalog app claiming host: its name and
	// certificate, or the catalog's error (catalog.ErrNotFound, ErrBusy,
	// ErrUnavailable). Nil without a catalog.
	Stored func(ctx context.Context, host string) (app string, c *Cert, err error)
	// Registry takes the metrics of what the choice could not do.
	Registry prometheus.Registerer
}

// Chooser is the TLS listeners' certificate choice. Safe for concurrent
// use.
type Chooser struct {
	o         Options
	fallbacks *prometheus.CounterVec
	errors    *prometheus.CounterVec
}

// New returns the Chooser of o, its metrics registered.
func New(o Options) *Chooser {
	c := &Chooser{o: o,
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_tls_sni_fallback_total",
			Help: "TLS handshakes for a host not yet loaded from the catalog that got the listener's certificate because the catalog's loader refused (reason: catalog-busy or catalog-unavailable).",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_tls_certificate_errors_total",
			Help: "TLS handshakes failed because the app's stored certificate (apps.NAME.tls) does not load.",
		}, []string{"app"}),
	}
	o.Registry.MustRegister(c.fallbacks, c.errors)
	return c
}

// Certificate is the listeners' tls.Config.GetCertificate: ACME's or the
// app's own certificate for the SNI's host, or nil for the listener's.
func (c *Chooser) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.o.ACME != nil {
		if cert, ours, err := c.o.ACME.Certificate(hello); ours {
			return cert, err
		}
	}
	host := catalog.CanonicalHost(hello.ServerName)
	if host == "" {
		return nil, nil
	}
	if cert, ok := c.o.Table().lookup(host); ok || c.o.Stored == nil {
		return cert, nil
	}
	app, rc, err := c.o.Stored(hello.Context(), host)
	switch {
	case err == nil:
		cert, err := rc.certificate()
		if err != nil {
			c.errors.WithLabelValues(app).Inc()
			return nil, errNoCertificate
		}
		return cert, nil
	case errors.Is(err, catalog.ErrBusy):
		c.fallbacks.WithLabelValues(reply.CatalogBusy).Inc()
	case errors.Is(err, catalog.ErrUnavailable):
		c.fallbacks.WithLabelValues(reply.CatalogUnavailable).Inc()
	}
	// Not found, or the loader refused: the listener's certificate. The
	// request that follows gets the catalog's answer (404, or 503 with
	// Retry-After), as it would without TLS.
	return nil, nil
}

// StoredApp is the hosts and tls (nil: none) of the catalog app claiming
// host, ok false for none (or without a catalog): ACME's eligibility of a
// stored app's names (acme.StoredApp).
func (c *Chooser) StoredApp(ctx context.Context, host string) (hosts []string, t *config.AppTLS, ok bool, err error) {
	if c.o.Stored == nil {
		return nil, nil, false, nil
	}
	_, rc, err := c.o.Stored(ctx, host)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	return rc.hosts, rc.tls, true, nil
}
