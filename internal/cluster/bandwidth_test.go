package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/redistest"
	"github.com/prometheus/client_golang/prometheus"
)

// bwLimit is the cluster-wide bandwidth limit of the tests: 1 MB/s (burst
// 100 kB, chunks of 16 KiB).
const bwLimit = 1_000_000

// bwNode is one instance's bandwidth: its limiter shared through its
// Cluster, and its greedy connections.
type bwNode struct {
	c     *Cluster
	b     *Bandwidth
	l     *bandwidth.Limiter
	flows []bandwidth.Reservation
}

// bwNodes makes n instances on one fake clock sharing app's 1 MB/s, the
// heartbeats driven by the test.
func bwNodes(t *testing.T, r *redistest.Server, n int) ([]*bwNode, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	insts := instances(t, r, n, Options{Clock: clk, Heartbeat: 100 * time.Millisecond})
	out := make([]*bwNode, n)
	for i, in := range insts {
		l, err := bandwidth.New(bandwidth.Options{Name: "app", Rate: bwLimit, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &bwNode{c: in.c, b: in.c.Bandwidth("app", l, bwLimit), l: l}
	}
	return out, clk
}

// setFlows gives node k greedy connections (dropping or adding some).
func (nd *bwNode) setFlows(t *testing.T, k int) {
	for len(nd.flows) > k {
		nd.flows = nd.flows[:len(nd.flows)-1] // its queued chunk still passes
	}
	for len(nd.flows) < k {
		r, err := nd.l.ReserveAt(nd.c.clk.Now(), nd.l.Chunk())
		if err != nil {
			t.Fatal(err)
		}
		nd.flows = append(nd.flows, r)
	}
}

// step passes every connection's chunk that is due at now and asks for its
// next one; it returns the bytes passed.
func (nd *bwNode) step(t *testing.T, now time.Time) int64 {
	var passed int64
	for i, r := range nd.flows {
		if r.At().After(now) {
			continue
		}
		passed += int64(nd.l.Chunk())
		nr, err := nd.l.ReserveAt(now, nd.l.Chunk())
		if err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
		nd.flows[i] = nr
	}
	return passed
}

// beat is one heartbeat of every node at the clock's now.
func beat(nodes []*bwNode, clk *clock.Fake) {
	for _, nd := range nodes {
		nd.c.Tick(clk.Now())
	}
}

// runBW moves the fake clock by d in 1 ms steps, a heartbeat every 100 ms,
// and returns the bytes each node passed.
func runBW(t *testing.T, nodes []*bwNode, clk *clock.Fake, d time.Duration) []int64 {
	got := make([]int64, len(nodes))
	for ms := time.Millisecond; ms <= d; ms += time.Millisecond {
		clk.Advance(time.Millisecond)
		if ms%(100*time.Millisecond) == 0 {
			beat(nodes, clk)
		}
		for i, nd := range nodes {
			got[i] += nd.step(t, clk.Now())
		}
	}
	return got
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestBandwidthFollowsDemand: 2 and 3 instances, offered load 3:1 (and 0 on
// the third): the total passed stays within the limit plus bursts, and the
// busy instance gets ≥ 70% of the limit, not 1/n. When it goes idle, the
// other takes the limit over within a few heartbeats. The limiters are
// never rebuilt: shares are set in place.
func TestBandwidthFollowsDemand(t *testing.T) {
	r := redistest.Start(t)
	for _, load := range [][]int{{6, 2}, {6, 2, 0}} {
		t.Run(fmt.Sprintf("flows=%v", load), func(t *testing.T) {
			nodes, clk := bwNodes(t, r, len(load))
			beat(nodes, clk)
			beat(nodes, clk) // every instance knows of the others
			for i, nd := range nodes {
				if sh, even := nd.b.Share(), int64(bwLimit/len(load)); sh != even {
					t.Fatalf("instance %d: share %d with no demand, want %d (even)", i, sh, even)
				}
				nd.setFlows(t, load[i])
			}
			const window = 5 * time.Second
			got := runBW(t, nodes, clk, window)
			burst := int64(len(nodes)) * 100_000
			chunks := int64(8 * 16 << 10) // the flows' first, unpaced grants
			if total, most := sum(got), bwLimit*int64(window/time.Second)+burst+chunks; total > most {
				t.Errorf("passed %d bytes in %v, over the limit + bursts (%d): %v", total, window, most, got)
			}
			// Measured after the shares settle (a few heartbeats).
			late := runBW(t, nodes, clk, 2*time.Second)
			total := sum(late)
			if total > 2*bwLimit*102/100+chunks || total < 2*bwLimit*98/100 {
				t.Errorf("settled: passed %d bytes in 2 s, want the limit (2000000, ±2%%): %v", total, late)
			}
			if busy := late[0]; busy < 2*bwLimit*70/100 {
				t.Errorf("settled: the busy instance passed %d of %d bytes in 2 s, want ≥ 70%% of the limit", busy, total)
			}
			t.Logf("shares: %d %d…; settled bytes %v", nodes[0].b.Share(), nodes[1].b.Share(), late)

			// The busy one goes idle: the other takes the limit over.
			nodes[0].setFlows(t, 0)
			runBW(t, nodes, clk, 500*time.Millisecond) // 5 heartbeats
			after := runBW(t, nodes, clk, time.Second)
			if after[1] < bwLimit*85/100 || sum(after) > bwLimit*102/100+chunks {
				t.Errorf("after the busy instance went idle: %v bytes in 1 s, want ≥ 85%% of the limit on the other", after)
			}
			for i, nd := range nodes {
				if nd.b.Limiter() != nd.l {
					t.Errorf("instance %d: limiter replaced", i)
				}
			}
		})
	}
}

// TestBandwidthDemandShare: the share arithmetic, with its floor.
func TestBandwidthDemandShare(t *testing.T) {
	for _, tc := range []struct {
		demands map[string]int64
		live    int
		want    map[string]int64
	}{
		{map[string]int64{"a": 0, "b": 0}, 2, map[string]int64{"a": 500, "b": 500}},
		{map[string]int64{"a": 300, "b": 100}, 2, map[string]int64{"a": 750, "b": 250}},
		{map[string]int64{"a": 300, "b": 100, "c": 0}, 3, map[string]int64{"a": 745, "b": 248, "c": 6}},
		{map[string]int64{"a": 1000, "b": 0}, 2, map[string]int64{"a": 990, "b": 10}},
		{map[string]int64{"a": 1000}, 1, map[string]int64{"a": 1000}},
		// Two live instances not yet published keep a third each.
		{map[string]int64{"a": 1000}, 3, map[string]int64{"a": 333}},
	} {
		var total int64
		for id, want := range tc.want {
			got := demandShare(1000, id, tc.demands, tc.live)
			if got != want {
				t.Errorf("demands %v live %d: %s gets %d, want %d", tc.demands, tc.live, id, got, want)
			}
			total += got
		}
		if total > 1000 {
			t.Errorf("demands %v: shares sum to %d, over the limit", tc.demands, total)
		}
	}
}

// TestBandwidthFallsBackWhileRedisDown: with Redis unreachable each
// instance paces to limit ÷ live, and shares by demand again once it is
// back.
func TestBandwidthFallsBackWhileRedisDown(t *testing.T) {
	r := redistest.Start(t)
	nodes, clk := bwNodes(t, r, 2)
	beat(nodes, clk)
	beat(nodes, clk)
	nodes[0].setFlows(t, 4)
	runBW(t, nodes, clk, time.Second)
	if sh := nodes[0].b.Share(); sh < bwLimit*90/100 {
		t.Fatalf("busy share %d with the other idle, want ≥ 90%% of the limit", sh)
	}
	r.Stop()
	clk.Advance(100 * time.Millisecond)
	beat(nodes, clk)
	for i, nd := range nodes {
		if sh := nd.b.Share(); sh != bwLimit/2 || nd.l.Rate() != bwLimit/2 {
			t.Errorf("instance %d with Redis down: share %d, rate %d; want %d (limit ÷ 2 live)", i, sh, nd.l.Rate(), bwLimit/2)
		}
	}
	r.Restart()
	runBW(t, nodes, clk, time.Second)
	if sh := nodes[0].b.Share(); sh < bwLimit*90/100 {
		t.Errorf("busy share %d after Redis came back, want ≥ 90%% of the limit", sh)
	}

	// The share and the demand are exported per app.
	reg := prometheus.NewRegistry()
	reg.MustRegister(nodes[0].c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "app" {
				found[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	if got := found["levee_cluster_bandwidth_share_bytes_per_second"]; got != float64(nodes[0].b.Share()) {
		t.Errorf("share metric %v, want %d (all: %v)", got, nodes[0].b.Share(), found)
	}
	if got := found["levee_cluster_bandwidth_demand_bytes_per_second"]; got < bwLimit {
		t.Errorf("demand metric %v for a saturated instance, want ≥ the limit (all: %v)", got, found)
	}
}
