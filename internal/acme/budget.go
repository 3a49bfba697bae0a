package acme

import (
	"sync"
	"time"

	"golang.org/x/net/publicsuffix"

	"github.com/leveeproxy/levee/internal/config"
)

// bucket is a token bucket holding up to max tokens, refilled evenly at
// max per per. Its zero value is full once set up by newBucket's callers
// (tokens counts from full: missing entries in a table are full buckets).
type bucket struct {
	used float64   // tokens spent, not yet refilled
	at   time.Time // when used was last brought up to date
}

// level brings b up to now and returns the tokens available.
func (b *bucket) level(now time.Time, bg config.Budget) float64 {
	if !b.at.IsZero() && now.After(b.at) {
		refill := float64(bg.Max) * float64(now.Sub(b.at)) / float64(bg.Per.D())
		b.used = max(0, b.used-refill)
	}
	if now.After(b.at) {
		b.at = now
	}
	return float64(bg.Max) - b.used
}

// wait is how long until one token is available again.
func (b *bucket) wait(now time.Time, bg config.Budget) time.Duration {
	short := 1 - b.level(now, bg)
	if short <= 0 {
		return 0
	}
	return time.Duration(short * float64(bg.Per.D()) / float64(bg.Max))
}

// table is a bucket per key (a registered domain, a hostname). A full
// bucket is the same as none, so full ones are swept when the table grows
// past maxKeys: its size follows the keys in use, never the keys seen.
type table struct {
	b map[string]*bucket
}

// maxTrackedKeys bounds each table between sweeps of its full buckets.
// Only eligible names reach a table, so it is not an attacker's to fill.
const maxTrackedKeys = 100_000

func (t *table) get(key string, now time.Time, bg config.Budget) *bucket {
	if b, ok := t.b[key]; ok {
		return b
	}
	if t.b == nil {
		t.b = map[string]*bucket{}
	}
	if len(t.b) >= maxTrackedKeys {
		for k, b := range t.b {
			if b.level(now, bg) >= float64(bg.Max) {
				delete(t.b, k)
			}
		}
	}
	b := &bucket{at: now}
	t.b[key] = b
	return b
}

// Refusal reasons: why an order was not sent. Each is a metric label.
const (
	ReasonUnknown           = "unknown"            // no app claims the name
	ReasonBackoff           = "backoff"            // the name failed recently
	ReasonOrders            = "orders"             // the account's order budget is spent
	ReasonCertificates      = "certificates"       // the registered domain's budget is spent
	ReasonFailedValidations = "failed-validations" // the name's failure budget is spent
	ReasonBusy              = "busy"               // issuance concurrency is full
)

// Refused is why the budgets refused an order, and when it may be tried.
type Refused struct {
	Reason     string
	RetryAfter time.Duration
}

func (r *Refused) Error() string {
	return "acme: order refused by the " + r.Reason + " budget; retry in " + r.RetryAfter.Round(time.Second).String()
}

// Budgets decides whether an order may be sent now, so that levee never
// sends one the CA would refuse: per account (orders), per registered
// domain (new certificates; renewals are exempt), and per hostname
// (failed validations), plus an exponential backoff per name after a
// failure. It is safe for concurrent use; every method takes now.
type Budgets struct {
	cfg config.ACMEBudgets

	mu      sync.Mutex
	orders  bucket
	domains table // registered domain → new certificates
	failed  table // hostname → failed validations
	backoff map[string]backoff
}

type backoff struct {
	failures int
	until    time.Time
}

// firstBackoff is the wait after a name's first failure; each failure in
// a row doubles it, up to the configured max_backoff.
const firstBackoff = time.Minute

// NewBudgets returns full budgets for validated cfg.
func NewBudgets(cfg config.ACMEBudgets) *Budgets {
	return &Budgets{cfg: cfg, backoff: map[string]backoff{}}
}

// RegisteredDomain is name's registered domain by the public suffix list
// (a.b.example.co.uk → example.co.uk), or name itself when it has none.
func RegisteredDomain(name string) string {
	if d, err := publicsuffix.EffectiveTLDPlusOne(name); err == nil {
		return d
	}
	return name
}

// Allowed reports, without spending anything, whether name may be
// ordered now: nil, or a *Refused.
func (b *Budgets) Allowed(name string, renewal bool, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.check(name, renewal, now)
}

func (b *Budgets) check(name string, renewal bool, now time.Time) error {
	if bo, ok := b.backoff[name]; ok && now.Before(bo.until) {
		return &Refused{Reason: ReasonBackoff, RetryAfter: bo.until.Sub(now)}
	}
	if w := b.failed.get(name, now, b.cfg.FailedValidations).wait(now, b.cfg.FailedValidations); w > 0 {
		return &Refused{Reason: ReasonFailedValidations, RetryAfter: w}
	}
	if !renewal {
		d := RegisteredDomain(name)
		if w := b.domains.get(d, now, b.cfg.Certificates).wait(now, b.cfg.Certificates); w > 0 {
			return &Refused{Reason: ReasonCertificates, RetryAfter: w}
		}
	}
	if w := b.orders.wait(now, b.cfg.Orders); w > 0 {
		return &Refused{Reason: ReasonOrders, RetryAfter: w}
	}
	return nil
}

// Take spends an order (and, unless renewal, a certificate of name's
// registered domain) when every budget allows it; else it spends nothing
// and returns a *Refused.
func (b *Budgets) Take(name string, renewal bool, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(name, renewal, now); err != nil {
		return err
	}
	b.orders.used++
	if !renewal {
		b.domains.get(RegisteredDomain(name), now, b.cfg.Certificates).used++
	}
	return nil
}

// Failed records a failed validation of name: it spends one of the
// name's failed-validation budget and backs the name off, for a time
// doubling with each failure in a row up to max_backoff. It returns that
// time.
func (b *Budgets) Failed(name string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	fb := b.failed.get(name, now, b.cfg.FailedValidations)
	fb.level(now, b.cfg.FailedValidations)
	fb.used++
	bo := b.backoff[name]
	bo.failures++
	wait := b.cfg.MaxBackoff.D()
	if bo.failures < 32 { // past 2^31 minutes the cap has long been reached
		wait = min(wait, firstBackoff<<(bo.failures-1))
	}
	bo.until = now.Add(wait)
	if len(b.backoff) >= maxTrackedKeys {
		for k, o := range b.backoff {
			if !now.Before(o.until) {
				delete(b.backoff, k)
			}
		}
	}
	b.backoff[name] = bo
	return wait
}

// Succeeded forgets name's failures in a row (not its spent budget).
func (b *Budgets) Succeeded(name string) {
	b.mu.Lock()
	delete(b.backoff, name)
	b.mu.Unlock()
}

// nameState is what Budgets holds that bears on one name, in the form
// the store keeps it (fleetBudgets). A zero bucketState is a full bucket.
type nameState struct {
	Orders, Domain, Failed bucketState
	Backoff                backoffState
}

type bucketState struct {
	Used float64   `json:"used"`
	At   time.Time `json:"at"`
}

type backoffState struct {
	Failures int       `json:"failures"`
	Until    time.Time `json:"until"`
}

// snapshot returns name's buckets: the account's orders, its registered
// domain's certificates, its failed validations and its backoff.
func (b *Budgets) snapshot(name string) nameState {
	b.mu.Lock()
	defer b.mu.Unlock()
	state := func(k *bucket) bucketState {
		if k == nil {
			return bucketState{}
		}
		return bucketState{Used: k.used, At: k.at}
	}
	bo := b.backoff[name]
	return nameState{Orders: state(&b.orders), Domain: state(b.domains.b[RegisteredDomain(name)]),
		Failed: state(b.failed.b[name]), Backoff: backoffState{Failures: bo.failures, Until: bo.until}}
}

// restore replaces name's buckets with s.
func (b *Budgets) restore(name string, s nameState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.orders = bucket{used: s.Orders.Used, at: s.Orders.At}
	b.domains.set(RegisteredDomain(name), s.Domain)
	b.failed.set(name, s.Failed)
	if s.Backoff.Failures > 0 {
		b.backoff[name] = backoff{failures: s.Backoff.Failures, until: s.Backoff.Until}
	} else {
		delete(b.backoff, name)
	}
}

// set replaces key's bucket; a full one is dropped, as the sweep would.
func (t *table) set(key string, s bucketState) {
	if s.Used <= 0 {
		delete(t.b, key)
		return
	}
	if t.b == nil {
		t.b = map[string]*bucket{}
	}
	t.b[key] = &bucket{used: s.Used, at: s.At}
}
