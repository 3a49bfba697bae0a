package acme

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

func letsEncrypt() config.ACMEBudgets { return config.DefaultTLS().ACME.Budgets }

func reason(err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return r.Reason
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// The account's 300 orders per 3 hours: the 301st is refused, and one
// order's worth of refill (36 s) later, one more is allowed.
func TestBudgetOrdersBoundary(t *testing.T) {
	b := NewBudgets(letsEncrypt())
	now := time.Unix(1e9, 0)
	for i := range 300 {
		// renewals: exempt from the per-domain budget, so only orders count
		if err := b.Take(fmt.Sprintf("h%d.example.com", i), true, now); err != nil {
			t.Fatalf("order %d: %v", i+1, err)
		}
	}
	err := b.Take("late.example.com", true, now)
	var r *Refused
	if !errors.As(err, &r) || r.Reason != ReasonOrders || r.RetryAfter != 36*time.Second {
		t.Fatalf("order 301 = %v, want refused by orders, retry in 36s", err)
	}
	if err := b.Take("late.example.com", true, now.Add(36*time.Second-time.Millisecond)); reason(err) != ReasonOrders {
		t.Fatalf("just before the refill: %v", err)
	}
	if err := b.Take("late.example.com", true, now.Add(36*time.Second)); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
}

// 50 new certificates per registered domain per week; renewals exempt;
// other domains unaffected; subdomains share their registered domain.
func TestBudgetCertificatesPerRegisteredDomain(t *testing.T) {
	b := NewBudgets(letsEncrypt())
	now := time.Unix(1e9, 0)
	for i := range 50 {
		if err := b.Take(fmt.Sprintf("t%d.shop.example.co.uk", i), false, now); err != nil {
			t.Fatalf("cert %d: %v", i+1, err)
		}
	}
	steps := []struct {
		name    string
		renewal bool
		want    string
	}{
		{"other.example.co.uk", false, ReasonCertificates}, // same registered domain
		{"t1.shop.example.co.uk", true, ""},                // a renewal is exempt
		{"example.org", false, ""},                         // another domain
	}
	for _, s := range steps {
		if got := reason(b.Take(s.name, s.renewal, now)); got != s.want {
			t.Errorf("Take(%s, renewal %v) = %q, want %q", s.name, s.renewal, got, s.want)
		}
	}
	week := 7 * 24 * time.Hour
	if err := b.Take("other.example.co.uk", false, now.Add(week/50)); err != nil {
		t.Errorf("a fiftieth of a week later: %v", err)
	}
}

// Failed validations: the wait doubles from a minute up to max_backoff,
// and the sixth failure within the hour is refused by the failure budget
// even when the backoff has passed.
func TestBudgetFailuresBackOff(t *testing.T) {
	cfg := letsEncrypt()
	cfg.MaxBackoff = config.Duration(5 * time.Minute)
	b := NewBudgets(cfg)
	now := time.Unix(1e9, 0)
	const name = "bad.example.com"
	wants := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i, want := range wants {
		if got := b.Failed(name, now); got != want {
			t.Fatalf("failure %d: backoff %s, want %s", i+1, got, want)
		}
		if err := b.Take(name, false, now.Add(want-time.Nanosecond)); reason(err) != ReasonBackoff {
			t.Fatalf("failure %d: during backoff %v", i+1, err)
		}
	}
	// Five failures at one instant: the hour's budget is spent.
	err := b.Take(name, false, now.Add(5*time.Minute))
	var r *Refused
	if !errors.As(err, &r) || r.Reason != ReasonFailedValidations {
		t.Fatalf("after 5 failures: %v", err)
	}
	if err := b.Take("good.example.com", false, now); err != nil {
		t.Fatalf("another name: %v", err)
	}
	if err := b.Take(name, false, now.Add(12*time.Minute)); err != nil { // one failure refilled
		t.Fatalf("12 minutes later: %v", err)
	}
	b.Succeeded(name)
	if got := b.Failed(name, now.Add(time.Hour)); got != time.Minute {
		t.Fatalf("after a success the backoff starts over: %s", got)
	}
}

// The default backoff reaches a day and stays there.
func TestBudgetBackoffCapsAtADay(t *testing.T) {
	b := NewBudgets(letsEncrypt())
	now := time.Unix(1e9, 0)
	var got time.Duration
	for range 40 {
		got = b.Failed("x.example.com", now)
	}
	if got != 24*time.Hour {
		t.Fatalf("backoff after 40 failures = %s, want 24h", got)
	}
}

// Allowed spends nothing.
func TestBudgetAllowedSpendsNothing(t *testing.T) {
	cfg := letsEncrypt()
	cfg.Orders = config.Budget{Max: 1, Per: config.Duration(time.Hour)}
	b := NewBudgets(cfg)
	now := time.Unix(1e9, 0)
	for range 3 {
		if err := b.Allowed("a.example.com", false, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Take("a.example.com", false, now); err != nil {
		t.Fatal(err)
	}
	if reason(b.Allowed("a.example.com", false, now)) != ReasonOrders {
		t.Fatal("Take did not spend the order")
	}
}
