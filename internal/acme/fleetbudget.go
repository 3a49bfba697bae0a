package acme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/caddyserver/certmagic"
)

// fleetBudgets keeps the budgets for every instance on one store (one
// ACME account): they spend from one set of buckets, kept in the store
// under budgetPrefix (sealed, as every value) and changed only under the
// store's lease budgetLease, so the CA sees no more orders from a fleet
// than from one instance. local mirrors what the store said at the last
// change, so that a handshake's check (Allowed) reads memory only; the
// store decides at every order (Take), so a stale mirror can let a
// handshake start an issuance that Take then refuses, never an order.
// The buckets also outlive a restart. Its methods are safe for
// concurrent use: the lease serializes them, within an instance too.
type fleetBudgets struct {
	st    *Storage
	local *Budgets
}

// budgetLease is the store's lease under which the budgets change;
// budgetPrefix the keys they are kept at.
const (
	budgetLease  = "levee_budget"
	budgetPrefix = "levee/budget/"
)

// budgetTimeout bounds a change of the budgets made after an order (its
// outcome), whatever remains of the order's own context.
const budgetTimeout = 30 * time.Second

// Allowed reports, from the mirror, whether name may be ordered now.
func (f *fleetBudgets) Allowed(name string, renewal bool, now time.Time) error {
	return f.local.Allowed(name, renewal, now)
}

// Take spends from the fleet's budgets for an order of name, as
// Budgets.Take does, or refuses it. A store that cannot be read or
// locked refuses it too (an error that is not a *Refused): an order the
// fleet's budgets cannot vouch for is not sent.
func (f *fleetBudgets) Take(ctx context.Context, name string, renewal bool, now time.Time) error {
	return f.change(ctx, name, func() error { return f.local.Take(name, renewal, now) })
}

// Failed records a failed validation of name for the fleet. Should the
// store fail, the failure still backs the name off on this instance.
func (f *fleetBudgets) Failed(ctx context.Context, name string, now time.Time) error {
	return f.record(ctx, name, func() { f.local.Failed(name, now) })
}

// Succeeded forgets name's failures in a row, for the fleet.
func (f *fleetBudgets) Succeeded(ctx context.Context, name string) error {
	return f.record(ctx, name, func() { f.local.Succeeded(name) })
}

// record applies an order's outcome, fn, to the fleet's budgets, or to
// the mirror alone when the store cannot be read; once either way.
func (f *fleetBudgets) record(ctx context.Context, name string, fn func()) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budgetTimeout)
	defer cancel()
	applied := false
	err := f.change(ctx, name, func() error { fn(); applied = true; return nil })
	if !applied {
		fn()
	}
	return err
}

// change loads name's buckets from the store into the mirror under the
// lease, runs fn on the mirror and, when fn spent or recorded anything
// (nil error), writes them back before the lease is given up.
func (f *fleetBudgets) change(ctx context.Context, name string, fn func() error) error {
	if err := f.st.Lock(ctx, budgetLease); err != nil {
		return fmt.Errorf("acme: the fleet's budgets: %w", err)
	}
	defer f.st.Unlock(context.WithoutCancel(ctx), budgetLease)
	keys := budgetKeys(name)
	var s nameState
	for _, k := range []struct {
		key string
		v   any
	}{{keys.orders, &s.Orders}, {keys.domain, &s.Domain}, {keys.failed, &s.Failed}, {keys.backoff, &s.Backoff}} {
		b, err := f.st.Load(ctx, k.key)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a full bucket, or no backoff
		}
		if err == nil {
			err = json.Unmarshal(b, k.v)
		}
		if err != nil {
			return fmt.Errorf("acme: the fleet's budgets: %s: %w", k.key, err)
		}
	}
	f.local.restore(name, s)
	if err := fn(); err != nil {
		return err
	}
	s = f.local.snapshot(name)
	for _, k := range []struct {
		key string
		v   any
	}{{keys.orders, s.Orders}, {keys.domain, s.Domain}, {keys.failed, s.Failed}, {keys.backoff, s.Backoff}} {
		b, _ := json.Marshal(k.v) // plain values: cannot fail
		if err := f.st.Store(ctx, k.key, b); err != nil {
			return fmt.Errorf("acme: the fleet's budgets: %w", err)
		}
	}
	return nil
}

// keysOf are the store's keys of name's buckets.
type keysOf struct{ orders, domain, failed, backoff string }

func budgetKeys(name string) keysOf {
	safe := certmagic.StorageKeys.Safe
	return keysOf{
		orders:  budgetPrefix + "orders",
		domain:  budgetPrefix + "certificates/" + safe(RegisteredDomain(name)),
		failed:  budgetPrefix + "failed/" + safe(name),
		backoff: budgetPrefix + "backoff/" + safe(name),
	}
}
