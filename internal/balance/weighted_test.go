package balance

import (
	"slices"
	"testing"
)

func TestWeightedIsExactPerCycleAndSmooth(t *testing.T) {
	p := NewWeighted([]int{5, 1, 1})
	var seq []int
	for range 7 * 100 {
		seq = append(seq, p.Pick())
	}
	for c := 0; c < len(seq); c += 7 {
		counts := [3]int{}
		for _, i := range seq[c : c+7] {
			counts[i]++
		}
		if counts != [3]int{5, 1, 1} {
			t.Fatalf("cycle %d picks %v; want exactly the weights 5,1,1", c/7, counts)
		}
	}
	// Smooth: the heavy backend never takes more than 5 picks in a row
	// across cycle boundaries, and the light ones are not adjacent.
	if got := seq[:7]; !slices.Equal(got, []int{0, 0, 1, 0, 2, 0, 0}) {
		t.Fatalf("first cycle %v; want the smooth order 0 0 1 0 2 0 0", got)
	}
}

func TestWeightedEqualWeightsIsRoundRobin(t *testing.T) {
	if _, ok := NewWeighted([]int{2, 2, 2}).(*RoundRobin); !ok {
		t.Fatal("equal weights should use the lock-free round robin")
	}
}
