package server

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// An app's own certificate (apps.NAME.tls) is served, on every TLS
// listener, to a client whose SNI names one of the app's hosts; every
// other handshake gets the listener's certificate. The config file's apps'
// certificates are loaded with the config and looked up in the snapshot's
// certTable; a stored app's are loaded with the app, through the catalog's
// bounded loader and cache, so a wave of handshakes for cold hosts waits
// on the loader exactly as their requests would, never on hot hosts.

// certTable maps every host pattern (exact and wildcard) of the config
// file's apps to its certificate, nil for the listener's; immutable once
// published. A host it knows is never looked for in the catalog.
type certTable map[string]*tls.Certificate

// newCertTable collects the certificates of cfg's apps; if several apps
// claim a host, the first by name with a certificate serves it.
func newCertTable(cfg *config.Config) certTable {
	t := certTable{}
	for _, name := range cfg.AppNames() {
		ac := cfg.Apps[name]
		var c *tls.Certificate
		if ac.TLS != nil {
			var err error
			if c, err = ac.TLS.Certificate(); err != nil { // validated config: a broken invariant
				panic(fmt.Sprintf("server: apps.%s.tls: %v", name, err))
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
func (t certTable) lookup(host string) (c *tls.Certificate, ok bool) {
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

// routeCert is a route's certificate as its app's config holds it.
type routeCert struct {
	cert *tls.Certificate // nil: the listener's
	err  error            // a stored certificate that did not load
	conf *config.App      // the app's config, for ACME's eligibility
}

func newRouteCert(ac *config.App) routeCert {
	if ac.TLS == nil {
		return routeCert{conf: ac}
	}
	c, err := ac.TLS.Certificate()
	return routeCert{cert: c, err: err, conf: ac}
}

// errNoCertificate fails the handshake of a host whose stored certificate
// does not load: serving the listener's instead would present a
// certificate for some other name.
var errNoCertificate = errors.New("levee: this host's certificate does not load")

// certificate is the listeners' tls.Config.GetCertificate: the app's own
// certificate for the SNI's host, or nil for the listener's.
func (s *Server) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c, ours, err := s.acmeCertificate(hello); ours {
		return c, err
	}
	host := catalog.CanonicalHost(hello.ServerName)
	if host == "" {
		return nil, nil
	}
	if c, ok := s.current.Load().certs.lookup(host); ok || s.lazy == nil {
		return c, nil
	}
	rt, err := s.lazy.LoadHost(hello.Context(), host)
	switch {
	case err == nil:
		return s.routeCertificate(rt)
	case errors.Is(err, catalog.ErrBusy):
		s.tlsMetrics.fallback(reasonCatalogBusy)
	case errors.Is(err, catalog.ErrUnavailable):
		s.tlsMetrics.fallback(reasonCatalogUnavailable)
	}
	// Not found, or the loader refused: the listener's certificate. The
	// request that follows gets the catalog's answer (404, or 503 with
	// Retry-After), as it would without TLS.
	return nil, nil
}

func (s *Server) routeCertificate(rt *route) (*tls.Certificate, error) {
	if rt.cert.err != nil {
		s.tlsMetrics.certError(rt.app.Name)
		return nil, errNoCertificate
	}
	return rt.cert.cert, nil
}

// tlsMetrics count what the certificate choice could not do.
type tlsMetrics struct {
	fallbacks *prometheus.CounterVec
	errors    *prometheus.CounterVec
}

func newTLSMetrics(reg prometheus.Registerer) *tlsMetrics {
	m := &tlsMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_tls_sni_fallback_total",
			Help: "TLS handshakes for a host not yet loaded from the catalog that got the listener's certificate because the catalog's loader refused (reason: catalog-busy or catalog-unavailable).",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_tls_certificate_errors_total",
			Help: "TLS handshakes failed because the app's stored certificate (apps.NAME.tls) does not load.",
		}, []string{"app"}),
	}
	reg.MustRegister(m.fallbacks, m.errors)
	return m
}

func (m *tlsMetrics) fallback(reason string) { m.fallbacks.WithLabelValues(reason).Inc() }
func (m *tlsMetrics) certError(app string)   { m.errors.WithLabelValues(app).Inc() }
