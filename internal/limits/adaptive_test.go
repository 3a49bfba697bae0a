package limits

import (
	"context"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/admit/limit"
	"github.com/leveeproxy/levee/internal/clock"
)

// countingAlgorithm counts the samples it is given.
type countingAlgorithm struct{ samples int }

func (c *countingAlgorithm) Observe(time.Time, time.Duration, int, bool) { c.samples++ }
func (c *countingAlgorithm) Limit() int                                  { return 10 }

// A request whose client left before the backend answered is no sample:
// its time says nothing of the backend's.
func TestAdaptiveLimitSkipsClientsThatLeft(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	l := admit.NewLimiter(admit.Limits{Concurrency: 10}, clk)
	alg := &countingAlgorithm{}
	a := newAdaptive(alg, limit.Config{}, admit.Limits{Concurrency: 10}, l, 1)
	for _, code := range []int{200, 503, StatusClientClosed, 0} {
		if _, err := l.AcquireWait(context.Background(), admit.Ticket{}); err != nil {
			t.Fatal(err)
		}
		(&adaptiveSlot{a: a, clk: clk, start: clk.Now()}).ReleaseStatus(code)
	}
	if alg.samples != 3 {
		t.Fatalf("%d samples of 200, 503, 499 and 0; want 3 (not the 499)", alg.samples)
	}
	if l.InFlight() != 0 {
		t.Fatalf("%d slots still held", l.InFlight())
	}
}
