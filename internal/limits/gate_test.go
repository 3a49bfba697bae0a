package limits

import (
	"context"
	"testing"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/clock"
)

// A gate whose limiter is sealed (the levee handed over) answers an
// arrival it has no slot for with Sealed: no answer of its own, no
// refusal counted.
func TestAdmitAtASealedLimiter(t *testing.T) {
	l := admit.NewLimiter(admit.Limits{Concurrency: 1, MaxLen: 4, MaxWait: 1 << 40}, clock.Real{})
	g := &Gate{Limiter: l, Clock: clock.Real{}}
	slot, ref, ok := g.Admit(context.Background(), admit.Ticket{}, nil)
	if !ok {
		t.Fatalf("Admit = %+v", ref)
	}
	l.Seal(true)
	if _, ref, ok := g.Admit(context.Background(), admit.Ticket{}, nil); ok || ref != Sealed {
		t.Fatalf("Admit at a full sealed limiter = %+v, %v; want Sealed", ref, ok)
	}
	admit.Release(slot, 200)
}
