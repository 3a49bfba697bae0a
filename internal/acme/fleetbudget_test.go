package acme

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// Two instances on one store spend from one budget: with 3 orders an
// hour, two each is refused at the fourth, whichever instance asks; a
// failure on one backs the name off on the other; and the spending
// outlives both (a third, started later, is refused too). A store that
// cannot be read refuses the order.
func TestFleetBudgetsAreShared(t *testing.T) {
	stores(t, func(t *testing.T, open func([]byte) (*Storage, error), _ func() *sql.DB) {
		cfg := letsEncrypt()
		cfg.Orders = config.Budget{Max: 3, Per: config.Duration(time.Hour)}
		instance := func() *fleetBudgets {
			return &fleetBudgets{st: mustOpen(t, open, testKey(1)), local: NewBudgets(cfg)}
		}
		a, b := instance(), instance()
		ctx := context.Background()
		now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
		for i, take := range []struct {
			f    *fleetBudgets
			name string
		}{{a, "one.example.com"}, {b, "two.example.org"}, {a, "three.example.net"}} {
			if err := take.f.Take(ctx, take.name, false, now); err != nil {
				t.Fatalf("order %d: %v", i, err)
			}
		}
		var r *Refused
		if err := b.Take(ctx, "four.example.com", false, now); !errors.As(err, &r) || r.Reason != ReasonOrders {
			t.Fatalf("the fleet's fourth order: %v, want refused by orders", err)
		}
		if err := b.Allowed("five.example.com", false, now); !errors.As(err, &r) || r.Reason != ReasonOrders {
			t.Fatalf("b's mirror allows an order after the refusal: %v", err)
		}
		later := now.Add(20 * time.Minute) // one order refilled
		if err := a.Failed(ctx, "one.example.com", later); err != nil {
			t.Fatal(err)
		}
		if err := b.Take(ctx, "one.example.com", true, later); !errors.As(err, &r) || r.Reason != ReasonBackoff {
			t.Fatalf("b ordered a name a's failure backs off: %v", err)
		}
		if err := b.Take(ctx, "two.example.org", true, later); err != nil {
			t.Fatalf("the refilled order: %v", err)
		}
		if err := instance().Take(ctx, "six.example.com", true, later); !errors.As(err, &r) || r.Reason != ReasonOrders {
			t.Fatalf("an instance started later ordered past the fleet's budget: %v", err)
		}
		gone := instance()
		gone.st.Close()
		if err := gone.Take(ctx, "seven.example.com", true, later.Add(time.Hour)); err == nil || errors.As(err, &r) {
			t.Fatalf("a store that cannot be read: %v, want an error that sends no order", err)
		}
	})
}
