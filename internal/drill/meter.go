package drill

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// meter counts, for each of a fixed set of Host names, what a drill backend
// sees: the requests in flight now and at most, and when each arrived. An
// edge's own metrics are not trusted; this is the truth behind it. Safe for
// concurrent use; its hosts are fixed by newMeter, so the map is read-only.
type meter struct {
	clk     clock.Clock
	start   time.Time
	holdFor time.Duration // each request is held this long before its answer
	hosts   map[string]*hostMeter
}

// hostMeter is one Host's counts.
type hostMeter struct {
	inflight, peak, count atomic.Int64
	mu                    sync.Mutex
	at                    []time.Duration // arrivals since the meter's start, in arrival order; at most maxArrivals
	dropped               int64           // arrivals past maxArrivals, not recorded
}

// maxArrivals bounds the arrivals a host records: 16 MiB, seven minutes at
// 5,000/s.
const maxArrivals = 1 << 21

func newMeter(clk clock.Clock, hold time.Duration, hosts ...string) *meter {
	m := &meter{clk: clk, start: clk.Now(), holdFor: hold, hosts: map[string]*hostMeter{}}
	for _, h := range hosts {
		m.hosts[strings.ToLower(h)] = &hostMeter{}
	}
	return m
}

// since is the time since the meter started, on its clock: the time base
// of its arrivals.
func (m *meter) since() time.Duration { return m.clk.Now().Sub(m.start) }

// host is the counts of Host h (a port is ignored), nil for another host.
func (m *meter) host(h string) *hostMeter {
	if name, _, err := net.SplitHostPort(h); err == nil {
		h = name
	}
	return m.hosts[strings.ToLower(h)]
}

// arrive counts a request to host as arrived and in flight; done ends it.
func (m *meter) arrive(host string) (done func()) {
	hm := m.host(host)
	if hm == nil {
		return func() {}
	}
	at := m.since()
	n := hm.inflight.Add(1)
	for p := hm.peak.Load(); n > p && !hm.peak.CompareAndSwap(p, n); p = hm.peak.Load() {
	}
	hm.count.Add(1)
	hm.mu.Lock()
	if len(hm.at) < maxArrivals {
		hm.at = append(hm.at, at)
	} else {
		hm.dropped++
	}
	hm.mu.Unlock()
	return func() { hm.inflight.Add(-1) }
}

// hold keeps a request for holdFor, so that requests overlap; false if the
// client went away or the backend is closing.
func (m *meter) hold(ctx context.Context, quit <-chan struct{}) bool {
	return m.holdFor <= 0 || sleepCtx(ctx, m.clk, m.holdFor, quit)
}

// arrivals is a sorted copy of the host's arrivals. They are appended in
// the order their handlers read the clock: nearly, not strictly, sorted.
func (hm *hostMeter) arrivals() []time.Duration {
	hm.mu.Lock()
	at := append([]time.Duration(nil), hm.at...)
	hm.mu.Unlock()
	slices.Sort(at)
	return at
}

// countBetween counts the sorted arrivals at in [from, to].
func countBetween(at []time.Duration, from, to time.Duration) int64 {
	lo, _ := slices.BinarySearch(at, from)
	hi, found := slices.BinarySearch(at, to)
	for found && hi < len(at) && at[hi] == to {
		hi++
	}
	return int64(hi - lo)
}
