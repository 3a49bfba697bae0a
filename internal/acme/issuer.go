package acme

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"strings"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"

	"github.com/leveeproxy/levee/internal/clock"
)

// budgetIssuer is the ACME issuer behind the budgets: every order,
// first or renewal, whoever starts it (a handshake, certmagic's
// maintenance, levee certs renew), spends from them first, and a refused
// one reaches no CA. Its outcomes back off names and feed the metrics.
type budgetIssuer struct {
	*certmagic.ACMEIssuer
	budgets *fleetBudgets
	clk     clock.Clock
	log     *slog.Logger
	m       *metrics
	// renewal says whether the store already holds a certificate of name
	// (a renewal, exempt from the per-domain budget).
	renewal func(ctx context.Context, name string) bool
	// eligible refuses (and counts) a name no app claims with acme any
	// more: its certificate is not renewed.
	eligible func(ctx context.Context, name string) error
	// done records each order's outcome for levee certs (nil err: issued).
	done func(name string, err error)
}

var (
	_ certmagic.Issuer     = (*budgetIssuer)(nil)
	_ certmagic.PreChecker = (*budgetIssuer)(nil)
	_ certmagic.Revoker    = (*budgetIssuer)(nil)
)

// Issue spends the budgets of the CSR's name and then orders.
func (b *budgetIssuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	name := ""
	if len(csr.DNSNames) > 0 {
		name = csr.DNSNames[0]
	}
	if err := b.eligible(ctx, name); err != nil {
		return nil, certmagic.ErrNoRetry{Err: err}
	}
	renewal := b.renewal(ctx, name)
	if err := b.budgets.Take(ctx, name, renewal, b.clk.Now()); err != nil {
		if r := (*Refused)(nil); errors.As(err, &r) {
			b.m.refused.WithLabelValues(r.Reason).Inc()
		}
		// certmagic would retry at once; the next maintenance pass (or
		// handshake) asks again, and the budgets answer again.
		return nil, certmagic.ErrNoRetry{Err: err}
	}
	b.m.orders.Inc()
	ic, err := b.ACMEIssuer.Issue(ctx, csr)
	switch {
	case err == nil:
		if err := b.budgets.Succeeded(ctx, name); err != nil {
			b.log.Warn("acme: cannot record a success in the fleet's budgets", "name", name, "err", err)
		}
		if renewal {
			b.m.certs.WithLabelValues("renewed").Inc()
		} else {
			b.m.certs.WithLabelValues("issued").Inc()
		}
	case ctx.Err() != nil: // levee is stopping: not the name's failure
	default:
		if err := b.budgets.Failed(ctx, name, b.clk.Now()); err != nil {
			b.log.Warn("acme: cannot record a failure in the fleet's budgets; it backs the name off here only", "name", name, "err", err)
		}
		b.m.failed.WithLabelValues(failureReason(err)).Inc()
	}
	b.done(name, err)
	return ic, err
}

// failureReason is a label for an order's failure: the ACME problem's
// type (connection, unauthorized, rateLimited, dns, ...) or "other".
func failureReason(err error) string {
	var p acme.Problem
	if errors.As(err, &p) && p.Type != "" {
		return p.Type[strings.LastIndexByte(p.Type, ':')+1:]
	}
	return "other"
}

// PreCheck is the ACME issuer's, never interactive: certmagic would
// otherwise ask for an email address on standard input.
func (b *budgetIssuer) PreCheck(ctx context.Context, names []string, _ bool) error {
	return b.ACMEIssuer.PreCheck(ctx, names, false)
}
