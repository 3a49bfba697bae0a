package limits

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/reply"
)

// Counts is a Counter in memory: refusals and shadowed refusals by reason,
// for an owner without Prometheus (the middleware). Every reason a gate
// gives has its counter from the start, so counting takes no lock and
// allocates nothing; a reason not known here counts as "other".
type Counts struct {
	rejected, shadowed map[string]*atomic.Uint64 // read-only once made
	waits              atomic.Uint64
}

// countedReasons are the reasons a Gate refuses with: the shadowable
// ones (shape, rate, body, batch) and the slot's.
var countedReasons = func() []string {
	r := slices.Clone(reply.Shadowable)
	for _, a := range admit.Reasons {
		r = append(r, string(a))
	}
	return append(r, "other")
}()

// NewCounts returns zeroed counts.
func NewCounts() *Counts {
	c := &Counts{rejected: map[string]*atomic.Uint64{}, shadowed: map[string]*atomic.Uint64{}}
	for _, r := range countedReasons {
		c.rejected[r], c.shadowed[r] = new(atomic.Uint64), new(atomic.Uint64)
	}
	return c
}

func count(m map[string]*atomic.Uint64, reason string) {
	n, ok := m[reason]
	if !ok {
		n = m["other"]
	}
	n.Add(1)
}

func (c *Counts) Rejected(reason string) { count(c.rejected, reason) }
func (c *Counts) Shadowed(reason string) { count(c.shadowed, reason) }

// QueueWait counts a request that waited in the queue.
func (c *Counts) QueueWait(time.Duration) { c.waits.Add(1) }

// Waited is the number of requests that waited in the queue for their slot.
func (c *Counts) Waited() uint64 { return c.waits.Load() }

// Snapshot returns the non-zero counts by reason.
func (c *Counts) Snapshot() (rejected, shadowed map[string]uint64) {
	return snapshot(c.rejected), snapshot(c.shadowed)
}

func snapshot(m map[string]*atomic.Uint64) map[string]uint64 {
	out := map[string]uint64{}
	for r, n := range m {
		if v := n.Load(); v > 0 {
			out[r] = v
		}
	}
	return out
}
