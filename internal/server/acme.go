package server

import (
	"bytes"
	"context"
	"net/http"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/sni"
)

// ACME's hooks in the server (tls.acme, package acme): the certificate
// of an ACME name comes first in the listeners' GetCertificate, a
// TLS-ALPN-01 validation ends at its handshake, and an HTTP-01 one is
// answered on a plain listener before routing, so that a validation
// never reaches an app nor counts against its limits.

// acmeALPN is the protocol a CA offers alone to validate TLS-ALPN-01.
const acmeALPN = "acme-tls/1"

// acmeChallengePath starts every HTTP-01 validation's path.
var acmeChallengePath = []byte(acme.HTTPChallengePrefix)

// setupCerts makes the listeners' certificate choice (package sni): ACME's
// names first (m, nil when tls.acme is off), then the config file's apps'
// and the catalog's. It registers the manager's metrics and gives it the
// catalog's apps (none without a catalog).
func (s *Server) setupCerts(m *acme.Manager) {
	o := sni.Options{Registry: s.metrics.Registry, Table: func() sni.Table { return s.current.Load().certs }}
	if s.lazy != nil {
		o.Stored = s.storedCert
	}
	if m != nil { // not a nil *Manager in the interface
		o.ACME = m
	}
	s.certs, s.acme = sni.New(o), m
	if m == nil {
		return
	}
	s.metrics.Registry.MustRegister(m.Collectors()...)
	if s.lazy != nil {
		m.SetStored(s.certs.StoredApp)
		s.lazy.OnCertificates(m.CertificatesWritten) // the fleet's certificates, by the change feed
	}
}

// storedCert loads the catalog app claiming host, for its certificate.
func (s *Server) storedCert(ctx context.Context, host string) (string, *sni.Cert, error) {
	rt, err := s.lazy.LoadHost(ctx, host)
	if err != nil {
		return "", nil, err
	}
	return rt.app.Name, &rt.cert, nil
}

// serveACMEFast answers an HTTP-01 validation on a plain listener, and
// reports whether it did.
func (s *Server) serveACMEFast(ctx *fasthttp.RequestCtx) bool {
	if s.acme == nil || ctx.IsTLS() || !bytes.HasPrefix(ctx.Path(), acmeChallengePath) {
		return false
	}
	answered := false
	fasthttpadaptor.NewFastHTTPHandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answered = s.acme.ServeHTTPChallenge(w, r)
	})(ctx)
	if !answered {
		ctx.Response.Reset() // the adaptor's empty 200: routing answers instead
	}
	return answered
}

// ACMEListeners are the bound addresses that answer ACME's challenges:
// the first plain listener (HTTP-01) and the first TLS one (TLS-ALPN-01).
func (s *Server) ACMEListeners() acme.Listeners {
	var l acme.Listeners
	for _, ln := range s.listeners {
		switch {
		case ln.tls != nil && l.TLS == "":
			l.TLS = ln.ln.Addr().String()
		case ln.tls == nil && l.HTTP == "":
			l.HTTP = ln.ln.Addr().String()
		}
	}
	return l
}
