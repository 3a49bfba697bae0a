package cluster

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/redistest"
)

// BenchmarkDecision measures one limit decision of the app's key, from
// three instances sharing one Redis (cluster) or in process (local), at
// whatever load b.RunParallel offers (far beyond the limit). It reports the
// p50, p99 and p99.9 of a decision and the Redis round trips per 1,000
// decisions; roundtrip is one lease taken from Redis, what a decision that
// has to ask costs.
//
//	go test -run '^$' -bench Decision -benchtime 100000x ./internal/cluster
func BenchmarkDecision(b *testing.B) {
	lim := ratelimit.Limit{Interval: time.Second / 5000, Burst: 500} // 5000/s
	b.Run("local", func(b *testing.B) {
		st, err := ratelimit.NewLocalStore(ratelimit.Options{MaxKeys: 1000})
		if err != nil {
			b.Fatal(err)
		}
		measure(b, func(i int, now time.Time) bool { return st.AllowAt("\x00app", lim, now, 1).Allowed })
	})
	b.Run("cluster", func(b *testing.B) {
		r := redistest.Start(b)
		var stores []*Store
		var clusters []*Cluster
		for range 3 {
			c, err := New(Options{Addrs: []string{r.Addr()}, Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			st, _ := c.Store("app", 1000, nil)
			stores, clusters = append(stores, st), append(clusters, c)
		}
		before := uint64(0)
		for _, c := range clusters {
			before += c.RoundTrips()
		}
		measure(b, func(i int, now time.Time) bool { return stores[i%3].AllowAt("\x00app", lim, now, 1).Allowed })
		trips := uint64(0)
		for _, c := range clusters {
			trips += c.RoundTrips()
		}
		b.ReportMetric(float64(trips-before)*1000/float64(b.N), "trips/1000")
	})
	// What a decision that must ask Redis waits for: one take, one round trip.
	b.Run("roundtrip", func(b *testing.B) {
		r := redistest.Start(b)
		c, err := New(Options{Addrs: []string{r.Addr()}, Prefix: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		st, _ := c.Store("app", 1000, nil)
		e := &entry{redisKey: "bench:app:rt"}
		measure(b, func(i int, now time.Time) bool {
			ch := make(chan struct{})
			st.take(e, lim, now, 1, ch)
			return true
		})
	})
}

func measure(b *testing.B, decide func(i int, now time.Time) bool) {
	var mu sync.Mutex
	var all []time.Duration
	admitted := 0
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		n, i := 0, 0
		for pb.Next() {
			t := time.Now()
			if decide(i, t) {
				n++
			}
			mine = append(mine, time.Since(t))
			i++
		}
		mu.Lock()
		all = append(all, mine...)
		admitted += n
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(all[len(all)*999/1000].Nanoseconds()), "p999-ns")
	}
	b.ReportMetric(float64(admitted)/elapsed.Seconds(), "admitted/s")
}
