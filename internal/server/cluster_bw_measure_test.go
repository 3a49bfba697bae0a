package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/redistest"
)

// TestMeasureClusterBandwidth measures cluster bandwidth on real clocks: two
// levee servers share limits.bandwidth through a real redis-server, with
// greedy downloads spread 3:1 (and then all on the second). It asserts only
// what pacing guarantees whatever the machine's speed (the total stays
// within the limit + bursts); the split is reported. It runs only with
// LEVEE_MEASURE=1 (numbers in docs/benchmarks.md).
func TestMeasureClusterBandwidth(t *testing.T) {
	if os.Getenv("LEVEE_MEASURE") != "1" {
		t.Skip("a measurement on real clocks: set LEVEE_MEASURE=1")
	}
	r := redistest.Start(t)
	const limit = 4_000_000
	body := strings.Repeat("x", 4<<20)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, body)
	}))
	t.Cleanup(be.Close)
	cfg := fmt.Sprintf(`
cluster: {redis: {addrs: [%s], timeout: 2s}, heartbeat: 100ms, key_prefix: bwm-%s}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {bandwidth: {rate: 4MB/s, max_delay: 30s}}
`, r.Addr(), testProto(), strings.TrimPrefix(be.URL, "http://"))
	ps := []*proxy{startProxy(t, cfg), startProxy(t, cfg)}
	time.Sleep(300 * time.Millisecond) // a few heartbeats: both live

	run := func(conns []int, d time.Duration) []int64 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		got := make([]atomic.Int64, len(ps))
		var wg sync.WaitGroup
		for i, n := range conns {
			for range n {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ps[i].URL+"/", nil)
						req.Host = "a.test"
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							return
						}
						n, _ := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						got[i].Add(n)
					}
				})
			}
		}
		wg.Wait()
		out := make([]int64, len(ps))
		for i := range got {
			out[i] = got[i].Load()
		}
		return out
	}
	for _, phase := range []struct {
		conns []int
		name  string
	}{{[]int{6, 2}, "3:1"}, {[]int{0, 4}, "all on the second"}} {
		run(phase.conns, 2*time.Second) // shares settle
		const d = 5 * time.Second
		got := run(phase.conns, d)
		total := got[0] + got[1]
		if most := int64(limit*d/time.Second) + 2*400_000 + 8*(16<<10); total > most {
			t.Errorf("%s: %d bytes in %v, over the limit + bursts (%d)", phase.name, total, d, most)
		}
		t.Logf("%s: %d B/s in total (%.1f%% of the limit), first %.1f%%, second %.1f%%; shares now %d and %d",
			phase.name, total/int64(d/time.Second), 100*float64(total)/float64(limit*d/time.Second),
			100*float64(got[0])/float64(total), 100*float64(got[1])/float64(total),
			ps[0].app("a").Bandwidth.Rate(), ps[1].app("a").Bandwidth.Rate())
	}
}
