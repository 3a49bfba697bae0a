package apps

import "testing"

// TestKept: equal settings keep the component, a change makes a new one
// and drops the old once, and Reset drops it so the next apply rebuilds.
func TestKept(t *testing.T) {
	var k Kept[int, *int]
	built, dropped := 0, 0
	build := func(n int) *int { built++; return &n }
	drop := func(*int) { dropped++ }
	first := k.Apply(1, build, drop)
	if k.Apply(1, build, drop) != first || built != 1 || dropped != 0 {
		t.Fatalf("equal settings: built %d, dropped %d; want the first kept", built, dropped)
	}
	second := k.Apply(2, build, drop)
	if second == first || *second != 2 || built != 2 || dropped != 1 {
		t.Fatalf("changed settings: built %d, dropped %d; want a new one and the old dropped", built, dropped)
	}
	k.Reset(drop)
	if dropped != 2 || k.Apply(2, build, drop) == second || built != 3 {
		t.Fatalf("after reset: built %d, dropped %d; want the same settings rebuilt", built, dropped)
	}
	var off Kept[int, *int]
	off.Reset(drop) // nothing held: nothing dropped
	if dropped != 2 {
		t.Fatal("reset of an empty kept dropped something")
	}
}
