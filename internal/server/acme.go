package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
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

// setupACME registers the manager's metrics and gives it the catalog's
// apps (none without a catalog).
func (s *Server) setupACME(m *acme.Manager) {
	s.acme = m
	if m == nil {
		return
	}
	s.metrics.Registry.MustRegister(m.Collectors()...)
	if s.lazy != nil {
		m.SetStored(s.storedApp)
		s.lazy.OnCertificates(m.CertificatesWritten) // the fleet's certificates, by the change feed
	}
}

// storedApp is the config of the catalog app claiming host, nil for none.
func (s *Server) storedApp(ctx context.Context, host string) (*config.App, error) {
	rt, err := s.lazy.LoadHost(ctx, host)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rt.cert.conf, nil
}

// acmeCertificate is the ACME certificate for hello; ours false when the
// name is not ACME's.
func (s *Server) acmeCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, bool, error) {
	if s.acme == nil {
		return nil, false, nil
	}
	return s.acme.Certificate(hello)
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
