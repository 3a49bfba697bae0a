package config

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// TLSSection is the top-level tls: section, settings of levee's TLS that
// are not one listener's or one app's.
type TLSSection struct {
	// ACME obtains and renews apps' certificates from a CA (see docs/tls.md).
	ACME ACME `yaml:"acme"`
}

// ACME configures automatic certificates. Off while CA is "". Only a name
// that an app claims, with `tls: acme` (or Default), is ever ordered, and
// the budgets keep levee within the CA's rate limits.
type ACME struct {
	// CA is the ACME directory URL ("" : ACME off).
	CA string `yaml:"ca"`
	// CARoot is a PEM file of roots trusted for the CA's directory (a
	// private or test CA); "" trusts the system's.
	CARoot string `yaml:"ca_root"`
	// Email is the ACME account's contact.
	Email string `yaml:"email"`
	// EAB binds the account to one at the CA (External Account Binding),
	// when the CA requires it.
	EAB *EAB `yaml:"eab"`
	// Challenges are the validation methods levee answers, tried in order:
	// tls-alpn-01 (on the TLS listeners) and http-01 (on the plain ones).
	Challenges []string `yaml:"challenges"`
	// KeyFile holds the key (32 bytes, base64 or hex) that encrypts the
	// certificates' private keys in the catalog store. Required: keys are
	// never stored in the clear.
	KeyFile string `yaml:"key_file"`
	// FirstWait is the longest the first handshake for a name without a
	// certificate waits for its issuance; past it the handshake gets the
	// listener's certificate.
	FirstWait Duration `yaml:"first_wait"`
	// WildcardSubdomains makes the names under an app's wildcard host
	// (*.example.com) eligible, each with a certificate of its own.
	WildcardSubdomains bool `yaml:"wildcard_subdomains"`
	// Default gives apps without a tls key an ACME certificate; an app
	// opts out with `tls: listener`.
	Default bool `yaml:"default"`
	// Concurrency bounds the issuances and renewals running at once.
	Concurrency int `yaml:"concurrency"`
	// Budgets mirror the CA's rate limits, so levee never sends an order
	// the CA would refuse.
	Budgets ACMEBudgets `yaml:"budgets"`

	key   []byte         // from KeyFile, as validation read it
	roots *x509.CertPool // from CARoot; nil: the system's
}

// EAB is an External Account Binding's key id and base64url MAC key.
type EAB struct {
	KeyID  string `yaml:"key_id"`
	MACKey string `yaml:"mac_key"`
}

// ACMEBudgets are token buckets: Max events, refilled evenly over Per.
type ACMEBudgets struct {
	// Orders per ACME account (Let's Encrypt: 300 new orders per 3 hours).
	Orders Budget `yaml:"orders"`
	// Certificates per registered domain (Let's Encrypt: 50 a week;
	// renewals are exempt).
	Certificates Budget `yaml:"certificates"`
	// FailedValidations per account and hostname (Let's Encrypt: 5 an hour).
	FailedValidations Budget `yaml:"failed_validations"`
	// MaxBackoff caps the wait after a name's failed validation, which
	// doubles with each failure in a row.
	MaxBackoff Duration `yaml:"max_backoff"`
}

// Budget is Max events per Per.
type Budget struct {
	Max int      `yaml:"max"`
	Per Duration `yaml:"per"`
}

// The challenge types.
const (
	ChallengeTLSALPN = "tls-alpn-01"
	ChallengeHTTP    = "http-01"
)

// ACME defaults, Let's Encrypt's limits among them; docs/tls.md states them.
const (
	DefaultACMEFirstWait         = 5 * time.Second
	DefaultACMEConcurrency       = 4
	DefaultACMEOrders            = 300
	DefaultACMEOrdersPer         = 3 * time.Hour
	DefaultACMECertificates      = 50
	DefaultACMECertificatesPer   = 7 * 24 * time.Hour
	DefaultACMEFailedValidations = 5
	DefaultACMEFailedPer         = time.Hour
	DefaultACMEMaxBackoff        = 24 * time.Hour
	// ACMEKeyBytes is the size of the key in tls.acme.key_file (AES-256).
	ACMEKeyBytes = 32
)

// DefaultTLS returns the tls section's defaults (ACME off).
func DefaultTLS() TLSSection {
	return TLSSection{ACME: ACME{
		Challenges:  []string{ChallengeTLSALPN, ChallengeHTTP},
		FirstWait:   Duration(DefaultACMEFirstWait),
		Concurrency: DefaultACMEConcurrency,
		Budgets: ACMEBudgets{
			Orders:            Budget{Max: DefaultACMEOrders, Per: Duration(DefaultACMEOrdersPer)},
			Certificates:      Budget{Max: DefaultACMECertificates, Per: Duration(DefaultACMECertificatesPer)},
			FailedValidations: Budget{Max: DefaultACMEFailedValidations, Per: Duration(DefaultACMEFailedPer)},
			MaxBackoff:        Duration(DefaultACMEMaxBackoff),
		},
	}}
}

// On says ACME is configured.
func (a *ACME) On() bool { return a.CA != "" }

// Key is the store encryption key read from KeyFile (nil when ACME is off).
func (a *ACME) Key() []byte { return a.key }

// Roots are the roots trusted for the CA's directory; nil: the system's.
func (a *ACME) Roots() *x509.CertPool { return a.roots }

// Wants says whether an app with this tls (nil: none) gets an ACME
// certificate.
func (a *ACME) Wants(t *AppTLS) bool {
	if !a.On() {
		return false
	}
	if t == nil {
		return a.Default
	}
	return t.ACME()
}

// validate checks the section; usesACME says some config app asks for
// ACME, and hasStore that a catalog store is configured (certificates are
// kept there).
func (a *ACME) validate(errs *Errors, rd reader, usesACME, hasStore bool) {
	const p = "tls.acme"
	if !a.On() {
		if usesACME {
			errs.add(p+".ca", "an app has tls: acme; set the ACME directory URL")
		}
		return
	}
	if u, err := url.Parse(a.CA); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs.add(p+".ca", "%q is not an http(s) URL", a.CA)
	}
	if !hasStore {
		errs.add(p, "needs catalog.sqlite or catalog.postgres, where certificates and keys are kept")
	}
	if a.EAB != nil && (a.EAB.KeyID == "" || a.EAB.MACKey == "") {
		errs.add(p+".eab", "both key_id and mac_key are required")
	}
	if len(a.Challenges) == 0 {
		errs.add(p+".challenges", "at least one of %s, %s", ChallengeTLSALPN, ChallengeHTTP)
	}
	for i, c := range a.Challenges {
		if c != ChallengeTLSALPN && c != ChallengeHTTP {
			errs.add(fmt.Sprintf("%s.challenges[%d]", p, i), "%q is not %s or %s", c, ChallengeTLSALPN, ChallengeHTTP)
		} else if slices.Index(a.Challenges, c) < i {
			errs.add(fmt.Sprintf("%s.challenges[%d]", p, i), "%s is listed twice", c)
		}
	}
	if a.FirstWait < 0 || a.FirstWait.D() > time.Minute {
		errs.add(p+".first_wait", "must be 0..1m (got %s)", a.FirstWait)
	}
	within(errs, p+".concurrency", a.Concurrency, 1, 256)
	b := &a.Budgets
	b.Orders.validate(errs, p+".budgets.orders")
	b.Certificates.validate(errs, p+".budgets.certificates")
	b.FailedValidations.validate(errs, p+".budgets.failed_validations")
	if b.MaxBackoff < Duration(time.Minute) || b.MaxBackoff.D() > 7*24*time.Hour {
		errs.add(p+".budgets.max_backoff", "must be 1m..168h (got %s)", b.MaxBackoff)
	}
	a.loadKey(errs, rd)
	if a.CARoot != "" {
		pem, err := rd.read(a.CARoot, MaxPEMBytes)
		if err != nil {
			errs.add(p+".ca_root", "%v", err)
		} else if a.roots = x509.NewCertPool(); !a.roots.AppendCertsFromPEM(pem) {
			errs.add(p+".ca_root", "%s holds no PEM certificate", a.CARoot)
		}
	}
}

func (b Budget) validate(errs *Errors, path string) {
	within(errs, path+".max", b.Max, 1, 1_000_000)
	if b.Per < Duration(time.Second) || b.Per.D() > 30*24*time.Hour {
		errs.add(path+".per", "must be 1s..720h (got %s)", b.Per)
	}
}

// loadKey reads KeyFile: 32 bytes written in base64 or hex, spaces around
// them ignored.
func (a *ACME) loadKey(errs *Errors, rd reader) {
	const p = "tls.acme.key_file"
	if a.KeyFile == "" {
		errs.add(p, "required: the certificates' keys are stored encrypted with it "+
			"(make one with: head -c 32 /dev/urandom | base64 > FILE)")
		return
	}
	raw, err := rd.read(a.KeyFile, 4096)
	if err != nil {
		errs.add(p, "%v", err)
		return
	}
	key, err := ParseACMEKey(raw)
	if err != nil {
		errs.add(p, "%s: %v", a.KeyFile, err)
		return
	}
	a.key = key
}

// ParseACMEKey decodes a key file's contents: ACMEKeyBytes bytes in
// base64 (standard or URL alphabet) or hex.
func ParseACMEKey(raw []byte) ([]byte, error) {
	s := strings.TrimSpace(string(raw))
	for _, dec := range []func(string) ([]byte, error){
		hex.DecodeString, base64.StdEncoding.DecodeString, base64.URLEncoding.DecodeString,
	} {
		if k, err := dec(s); err == nil && len(k) == ACMEKeyBytes {
			return k, nil
		}
	}
	return nil, fmt.Errorf("want %d bytes in base64 or hex", ACMEKeyBytes)
}

// The scalar forms of an app's tls.
const (
	// AppTLSACME: the certificate is obtained by ACME (tls.acme).
	AppTLSACME = "acme"
	// AppTLSListener: the listener's certificate, even when tls.acme.default is on.
	AppTLSListener = "listener"
)

// decodeYAML accepts `tls: acme`, `tls: listener` or a mapping of the
// certificate's fields.
func (t *AppTLS) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	if n = resolve(n); n.Kind == yaml.ScalarNode {
		if n.Value != AppTLSACME && n.Value != AppTLSListener {
			errs.add(path, "%q is not %s, %s or a mapping of cert and key", n.Value, AppTLSACME, AppTLSListener)
			return
		}
		t.Mode = n.Value
		return
	}
	decodeStruct(n, reflect.ValueOf(t).Elem(), path, errs)
}

// ACME says the app's certificate is obtained by ACME.
func (t *AppTLS) ACME() bool { return t != nil && t.Mode == AppTLSACME }

// MarshalYAML writes the scalar form back as it was written.
func (t *AppTLS) MarshalYAML() (any, error) {
	if t.Mode != "" {
		return t.Mode, nil
	}
	type plain AppTLS
	return (*plain)(t), nil
}

// Same reports whether a and b configure ACME alike, the key file's key
// and the roots as read included: a reload that changes tls.acme is
// refused (it takes a restart).
func (a *ACME) Same(b *ACME) bool {
	x, y := *a, *b
	x.key, y.key, x.roots, y.roots = nil, nil, nil, nil
	rootsSame := (a.roots == nil) == (b.roots == nil) && (a.roots == nil || a.roots.Equal(b.roots))
	return reflect.DeepEqual(x, y) && bytes.Equal(a.key, b.key) && rootsSame
}
