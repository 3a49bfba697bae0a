package balance

import (
	"sync"
	"testing"
)

func TestRoundRobinIsExactlyEven(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10} {
		rr := NewRoundRobin(n)
		counts := make([]int, n)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				local := make([]int, n)
				for range 250 * n {
					local[rr.Pick()]++
				}
				mu.Lock()
				for i, c := range local {
					counts[i] += c
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for i, c := range counts {
			if c != 1000 {
				t.Errorf("n=%d: backend %d got %d picks; want 1000", n, i, c)
			}
		}
	}
}
