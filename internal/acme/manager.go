package acme

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
)

// Options configure a Manager.
type Options struct {
	// Config is the validated config, tls.acme on; Reload replaces it.
	Config *config.Config
	// Storage keeps certificates and keys; the Manager does not close it.
	Storage *Storage
	// Stored finds catalog apps; nil when there is no catalog (set later
	// with SetStored, before Start).
	Stored StoredApp
	Logger *slog.Logger
	Clock  clock.Clock // nil: the real one
	// RenewCheck is how often certificates are checked for renewal; 0:
	// DefaultRenewCheck. Tests shorten it.
	RenewCheck time.Duration
	// Notes is told of every certificate this instance writes, for the
	// rest of its fleet (see CertificatesWritten); nil: none is told.
	Notes Notes
}

// DefaultRenewCheck is how often the renewal loop looks for certificates
// whose time has come.
const DefaultRenewCheck = 10 * time.Minute

// CacheCapacity bounds the certificates held in memory.
const CacheCapacity = 100_000

// issueTimeout bounds one issuance (order, validation, download),
// however long the handshake that started it waited.
const issueTimeout = 3 * time.Minute

// Manager obtains and renews certificates for eligible names and hands
// them to TLS handshakes. New starts nothing; Start starts certmagic's
// maintenance (renewals at two thirds of a certificate's life) and
// Close stops it and waits for every issuance it started.
type Manager struct {
	o       Options
	acme    config.ACME
	budgets *fleetBudgets
	m       *metrics
	file    atomic.Pointer[claims]
	stored  atomic.Pointer[StoredApp]

	magic  atomic.Pointer[certmagic.Config] // nil until Start
	cache  *certmagic.Cache
	issuer *budgetIssuer

	ctx     context.Context // ends at Close: every issuance's parent
	cancel  context.CancelFunc
	flights sync.WaitGroup
	sem     chan struct{} // one token per issuance running
	written *written      // told by the catalog's feed, for loadWritten

	mu       sync.Mutex
	flying   map[string]*flight // name → the issuance under way
	held     map[string]held    // name → its cached certificate's times
	renewing map[string]bool    // names whose renewal is under way here
}

// held is what the renewal loop knows of a cached certificate.
type held struct{ expires, renew time.Time }

// flight is one issuance that handshakes for its name wait on.
type flight struct {
	done chan struct{}
	cert *tls.Certificate // set before done closes; nil: none
	once sync.Once
}

// finish hands cert to the flight's waiters; the first call wins (the
// issuance, or the feed bringing the certificate another instance
// issued while this one waited for its lease).
func (f *flight) finish(cert *tls.Certificate) {
	f.once.Do(func() {
		f.cert = cert
		close(f.done)
	})
}

// New returns a Manager for validated o.Config (tls.acme on).
func New(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := o.Config.TLS.ACME
	m := &Manager{o: o, acme: a, budgets: &fleetBudgets{st: o.Storage, local: NewBudgets(a.Budgets)}, m: newMetrics(),
		sem: make(chan struct{}, a.Concurrency), flying: map[string]*flight{},
		held: map[string]held{}, renewing: map[string]bool{}, written: newWritten()}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	c := newClaims(o.Config)
	m.file.Store(&c)
	if o.Stored != nil {
		m.stored.Store(&o.Stored)
	}
	return m
}

// SetStored sets how catalog apps are found; call it before Start.
func (m *Manager) SetStored(fn StoredApp) { m.stored.Store(&fn) }

// Reload takes the config file's apps of cfg (tls.acme itself is read
// at New: a change to it takes a restart).
func (m *Manager) Reload(cfg *config.Config) {
	c := newClaims(cfg)
	m.file.Store(&c)
}

// Listeners are the addresses levee answers challenges on: HTTP-01 on a
// plain listener, TLS-ALPN-01 on a TLS one ("" for none: that challenge
// is not used).
type Listeners struct{ HTTP, TLS string }

// Start starts certmagic's cache and its maintenance; the challenge
// servers are levee's own listeners at l (certmagic, finding their
// ports taken, starts none of its own).
func (m *Manager) Start(l Listeners) error {
	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           zap.NewNop(),
		// An evicted certificate is loaded from the store again at its
		// next handshake, never ordered again.
		Capacity: CacheCapacity,
	})
	magic = certmagic.New(m.cache, certmagic.Config{
		Storage: m.o.Storage,
		Logger:  zap.NewNop(), // outcomes are counted and logged once each, by OnEvent
		OnEvent: m.onEvent,
		// Not certmagic's OnDemand: its maintenance skips on-demand
		// certificates and renews them in handshakes, which would then
		// wait on the CA. levee asks decide itself before a first order,
		// and budgetIssuer before every order, renewals included.
		OCSP: certmagic.OCSPConfig{DisableStapling: true},
		// levee's renewal loop renews each name at its own time
		// (renewalAt); certmagic's maintenance only in the last 2% of a
		// life, should that loop have failed all along.
		RenewalWindowRatio: 1.0 / 50,
		// The CA's renewal window would replace levee's spread.
		DisableARI: true,
	})
	tmpl := certmagic.ACMEIssuer{
		CA: m.acme.CA, Email: m.acme.Email, Agreed: true, TrustedRoots: m.acme.Roots(),
		DisableHTTPChallenge:    !slices.Contains(m.acme.Challenges, config.ChallengeHTTP) || l.HTTP == "",
		DisableTLSALPNChallenge: !slices.Contains(m.acme.Challenges, config.ChallengeTLSALPN) || l.TLS == "",
		CertObtainTimeout:       issueTimeout,
		Logger:                  zap.NewNop(),
	}
	if tmpl.DisableHTTPChallenge && tmpl.DisableTLSALPNChallenge {
		m.cache.Stop()
		return errors.New("acme: no listener can answer a challenge of tls.acme.challenges " +
			"(http-01 needs a plain listener, tls-alpn-01 a TLS one)")
	}
	if e := m.acme.EAB; e != nil {
		tmpl.ExternalAccount = &acme.EAB{KeyID: e.KeyID, MACKey: e.MACKey}
	}
	var err error
	if tmpl.ListenHost, tmpl.AltHTTPPort, err = hostPort(l.HTTP); err == nil {
		var host string
		host, tmpl.AltTLSALPNPort, err = hostPort(l.TLS)
		if tmpl.ListenHost == "" {
			tmpl.ListenHost = host
		}
	}
	if err != nil {
		m.cache.Stop()
		return err
	}
	m.issuer = &budgetIssuer{ACMEIssuer: certmagic.NewACMEIssuer(magic, tmpl), budgets: m.budgets, clk: m.o.Clock, log: m.o.Logger,
		m: m.m, renewal: m.hasCert, eligible: m.eligibleCounted, done: m.recordOutcome}
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic.Store(magic)
	m.flights.Go(m.renewLoop)
	m.flights.Go(m.loadWritten)
	return nil
}

func hostPort(addr string) (string, int, error) {
	if addr == "" {
		return "", 0, nil
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("acme: listener %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	return h, n, err
}

// Close stops renewals and waits for the issuances under way to end
// (their contexts are cancelled). Safe without Start.
func (m *Manager) Close() {
	m.cancel()
	m.flights.Wait()
	if m.cache != nil {
		m.cache.Stop()
	}
}

// hasCert says whether the store holds a certificate for name.
func (m *Manager) hasCert(ctx context.Context, name string) bool {
	return m.o.Storage.Exists(ctx, certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), name))
}

// eligible reports whether name may have a certificate now, and whether
// an app claims it at all.
func (m *Manager) eligible(ctx context.Context, name string) (ok, claimed bool, err error) {
	var stored StoredApp
	if p := m.stored.Load(); p != nil {
		stored = *p
	}
	return eligible(ctx, &m.acme, *m.file.Load(), stored, name)
}

// eligibleCounted is eligible, an ineligible name counted and refused.
func (m *Manager) eligibleCounted(ctx context.Context, name string) error {
	ok, claimed, err := m.eligible(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		if !claimed {
			m.m.refused.WithLabelValues(ReasonUnknown).Inc()
		}
		return errNotEligible
	}
	return nil
}

// decide is levee's decision function (certmagic's OnDemand
// DecisionFunc in shape), asked before a first order: the name must be
// eligible, and the budgets must allow an order (spent only when one is
// sent, by budgetIssuer).
func (m *Manager) decide(ctx context.Context, name string) error {
	if err := m.eligibleCounted(ctx, name); err != nil {
		return err
	}
	if err := m.budgets.Allowed(name, m.hasCert(ctx, name), m.o.Clock.Now()); err != nil {
		var r *Refused
		if errors.As(err, &r) {
			m.m.refused.WithLabelValues(r.Reason).Inc()
		}
		return err
	}
	return nil
}

// isChallenge says hello is a CA validating TLS-ALPN-01 (RFC 8737: the
// only protocol offered is acme-tls/1).
func isChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol
}

// Certificate is the listeners' GetCertificate for ACME names. ours is
// false for a name that is not ACME's (no app claims it with acme on):
// the caller picks its certificate as without ACME. For an ACME name, a
// nil certificate means the listener's. A name that has a certificate
// never waits; one that has none waits at most tls.acme.first_wait for
// its issuance.
func (m *Manager) Certificate(hello *tls.ClientHelloInfo) (cert *tls.Certificate, ours bool, err error) {
	magic := m.magic.Load()
	name := catalog.CanonicalHost(hello.ServerName)
	if magic == nil || name == "" {
		return nil, false, nil
	}
	if !isChallenge(hello) {
		if c := m.cached(name); c != nil {
			return c, true, nil
		}
	}
	ok, claimed, err := m.eligible(hello.Context(), name)
	if err != nil || !ok {
		if err == nil && !claimed {
			m.m.refused.WithLabelValues(ReasonUnknown).Inc() // counted, never logged: a flood costs no I/O
		}
		if isChallenge(hello) {
			return nil, true, errNotEligible
		}
		return nil, false, nil
	}
	if isChallenge(hello) {
		c, err := magic.GetCertificateWithContext(hello.Context(), hello)
		return c, true, err
	}
	if c := m.await(hello.Context(), name); c != nil {
		return c, true, nil
	}
	m.m.fallbacks.Inc()
	return nil, true, nil
}

// cached is name's certificate in the cache, if it has one still valid.
func (m *Manager) cached(name string) *tls.Certificate {
	now := m.o.Clock.Now()
	var best *certmagic.Certificate
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf != nil && now.Before(c.Leaf.NotAfter) && (best == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter)) {
			best = &c
		}
	}
	if best == nil {
		return nil
	}
	return &best.Certificate
}

// await starts name's issuance, or joins the one under way, and waits
// for it at most first_wait (or until ctx ends).
func (m *Manager) await(ctx context.Context, name string) *tls.Certificate {
	f := m.start(name)
	if f == nil {
		return nil
	}
	m.m.waits.Inc() // the one wait of a handshake: a name with a certificate never gets here
	t := m.o.Clock.NewTimer(m.acme.FirstWait.D())
	defer t.Stop()
	select {
	case <-f.done:
		return f.cert
	case <-t.C():
	case <-ctx.Done():
	}
	return nil
}

// start returns name's flight, starting it when a concurrency token is
// free; nil (counted) when none is.
func (m *Manager) start(name string) *flight {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.flying[name]; f != nil {
		return f
	}
	select {
	case m.sem <- struct{}{}:
	default:
		m.m.refused.WithLabelValues(ReasonBusy).Inc()
		return nil
	}
	f := &flight{done: make(chan struct{})}
	m.flying[name] = f
	m.flights.Go(func() {
		defer func() { <-m.sem }()
		cert := m.obtain(name)
		m.mu.Lock()
		delete(m.flying, name)
		m.mu.Unlock()
		f.finish(cert)
	})
	return f
}

// obtain loads name's certificate from the store (another instance may
// have issued it), or else orders one, and caches it: certmagic keeps it
// renewed from then on.
func (m *Manager) obtain(name string) *tls.Certificate {
	ctx, cancel := context.WithTimeout(m.ctx, issueTimeout)
	defer cancel()
	magic := m.magic.Load()
	if err := m.decide(ctx, name); err != nil {
		return nil
	}
	_, err := magic.CacheManagedCertificate(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		// ObtainCertSync holds the store's lease on name and looks in the
		// store again under it: one order per name in a fleet.
		if err = magic.ObtainCertSync(ctx, name); err == nil {
			_, err = magic.CacheManagedCertificate(ctx, name)
		}
	}
	if err != nil {
		m.o.Logger.Debug("acme: no certificate", "name", name, "err", err)
		return nil
	}
	return m.cached(name)
}

// recordOutcome keeps name's last failure in the store (forgets it on
// success), for levee certs on any instance.
func (m *Manager) recordOutcome(name string, err error) {
	ctx, cancel := context.WithTimeout(m.ctx, statusTimeout)
	defer cancel()
	if err := saveStatus(ctx, m.o.Storage, name, err, m.o.Clock.Now()); err != nil && ctx.Err() == nil {
		m.o.Logger.Warn("acme: cannot record the outcome of an order", "name", name, "err", err)
	}
}

// statusTimeout bounds the write of a name's last outcome.
const statusTimeout = 5 * time.Second

// Renew renews name's certificate now, whatever its age (levee certs
// renew, the admin API), within the budgets; it waits for the renewal up
// to ctx. An ineligible name is errNotEligible.
func (m *Manager) Renew(ctx context.Context, name string) error {
	magic := m.magic.Load()
	if magic == nil {
		return errors.New("acme: not started")
	}
	name = catalog.CanonicalHost(name)
	if err := m.decide(ctx, name); err != nil {
		return err
	}
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.sem }()
	rctx, cancel := context.WithTimeout(m.ctx, issueTimeout)
	defer cancel()
	if !m.hasCert(rctx, name) {
		if err := magic.ObtainCertSync(rctx, name); err != nil {
			return err
		}
	} else if err := magic.RenewCertSync(rctx, name, true); err != nil {
		return err
	}
	_, err := magic.CacheManagedCertificate(rctx, name)
	return err
}

// ErrNotEligible is returned for a name no app claims with tls: acme.
var ErrNotEligible = errNotEligible

// nearestExpiry is the days until the soonest expiry of a cached
// certificate (0 with none).
func (m *Manager) nearestExpiry() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var soonest time.Time
	for _, h := range m.held {
		if soonest.IsZero() || h.expires.Before(soonest) {
			soonest = h.expires
		}
	}
	if soonest.IsZero() {
		return 0
	}
	return soonest.Sub(m.o.Clock.Now()).Hours() / 24
}

// cachedCert notes the times of a certificate certmagic cached.
func (m *Manager) cachedCert(names []string) {
	for _, name := range names {
		if c := m.cached(name); c != nil && c.Leaf != nil {
			m.mu.Lock()
			if _, ok := m.held[name]; ok || len(m.held) < CacheCapacity {
				m.held[name] = held{expires: c.Leaf.NotAfter, renew: renewalAt(c.Leaf)}
			}
			m.mu.Unlock()
		}
	}
}

// renewLoop renews each certificate this instance holds at its own time
// (renewalAt), in the background, until Close.
func (m *Manager) renewLoop() {
	every := cmp.Or(m.o.RenewCheck, DefaultRenewCheck)
	for {
		t := m.o.Clock.NewTimer(every)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		m.renewDue()
	}
}

// renewDue starts the renewals whose time has come, as many as the
// concurrency tokens allow (the rest wait for the next look).
func (m *Manager) renewDue() {
	now := m.o.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, h := range m.held {
		if m.cache != nil && len(m.cache.AllMatchingCertificates(name)) == 0 {
			delete(m.held, name) // evicted: renewed by whoever loads it next
			continue
		}
		if now.Before(h.renew) || m.renewing[name] {
			continue
		}
		select {
		case m.sem <- struct{}{}:
		default:
			return
		}
		m.renewing[name] = true
		m.flights.Go(func() {
			defer func() { <-m.sem }()
			m.renewOne(name)
			m.mu.Lock()
			delete(m.renewing, name)
			m.mu.Unlock()
		})
	}
}

// renewOne renews name under a lease of the store, so that one instance
// of a fleet renews it: under the lease it first loads what is stored,
// and renews only if that is still due. The new certificate replaces the
// old in the cache with no moment without one.
func (m *Manager) renewOne(name string) {
	ctx, cancel := context.WithTimeout(m.ctx, issueTimeout)
	defer cancel()
	magic := m.magic.Load()
	lease := "levee_renew_" + certmagic.StorageKeys.Safe(name)
	if err := m.o.Storage.Lock(ctx, lease); err != nil {
		return
	}
	defer m.o.Storage.Unlock(context.WithoutCancel(ctx), lease)
	old := m.cache.AllMatchingCertificates(name)
	if _, err := magic.CacheManagedCertificate(ctx, name); err != nil {
		return
	}
	if c := m.cached(name); c == nil || c.Leaf == nil || !m.o.Clock.Now().Before(renewalAt(c.Leaf)) {
		if err := magic.RenewCertSync(ctx, name, true); err != nil {
			return
		}
		if _, err := magic.CacheManagedCertificate(ctx, name); err != nil {
			return
		}
	}
	m.swapIn(name, old)
}

// onEvent logs each issuance's outcome once.
func (m *Manager) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cached_managed_cert":
		names, _ := data["sans"].([]string)
		m.cachedCert(names)
	case "cert_obtained":
		m.o.Logger.Info("acme: certificate obtained", "name", name, "renewal", renewal)
		m.announce(name)
	case "cert_failed":
		err, _ := data["error"].(error)
		var r *Refused
		if errors.As(err, &r) {
			return nil // counted by the budgets; the name asks again later
		}
		m.o.Logger.Warn("acme: certificate not obtained", "name", name, "renewal", renewal, "err", err)
	}
	return nil
}

// HTTPChallengePrefix starts the path of every HTTP-01 validation.
const HTTPChallengePrefix = "/.well-known/acme-challenge/"

// ServeHTTPChallenge answers an HTTP-01 validation request for an
// eligible name, before routing: it reports whether it answered. A
// request for another name, or another path, is left to the caller.
func (m *Manager) ServeHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	if m.magic.Load() == nil || !strings.HasPrefix(r.URL.Path, HTTPChallengePrefix) {
		return false
	}
	ok, _, err := m.eligible(r.Context(), catalog.CanonicalHost(r.Host))
	if err != nil || !ok {
		return false
	}
	return m.issuer.HandleHTTPChallenge(w, r)
}
