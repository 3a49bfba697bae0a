package catalog

import (
	"fmt"
	"testing"
)

// TestSieveScanResistance: hot keys used between insertions survive a scan
// of many keys seen once.
func TestSieveScanResistance(t *testing.T) {
	s := newSieve[int](10, 1)
	sh := &s.shards[0]
	for i := range 5 {
		sh.put(fmt.Sprint("hot", i), i, 0, sh.generation())
	}
	evicted := 0
	for i := range 1000 {
		for j := range 5 {
			if sh.get(fmt.Sprint("hot", j)) == nil {
				t.Fatalf("hot%d evicted after %d cold keys", j, i)
			}
		}
		_, out := sh.put(fmt.Sprint("cold", i), i, 0, sh.generation())
		evicted += len(out)
	}
	if n := s.len(); n != 10 {
		t.Errorf("len = %d, want the capacity 10", n)
	}
	if evicted != 1000-5 {
		t.Errorf("evicted %d, want %d", evicted, 1000-5)
	}
}

func TestSieveGenerationDropsStaleInserts(t *testing.T) {
	s := newSieve[int](10, 1)
	sh := &s.shards[0]
	gen := sh.generation()
	sh.remove("a") // an invalidation while a load was reading
	if ok, _ := sh.put("a", 1, 0, gen); ok {
		t.Fatal("a load that began before an invalidation inserted")
	}
	if ok, _ := sh.put("a", 1, 0, sh.generation()); !ok {
		t.Fatal("a fresh load did not insert")
	}
	if n := sh.removeIf(func(k string) bool { return k == "a" }); len(n) != 1 || sh.get("a") != nil {
		t.Fatal("removeIf did not remove a")
	}
	// The list stays consistent after removals: fill and evict again.
	for i := range 50 {
		sh.put(fmt.Sprint(i), i, 0, sh.generation())
	}
	if s.len() != 10 {
		t.Fatalf("len = %d", s.len())
	}
	count := 0
	for n := sh.tail; n != nil; n = n.next {
		count++
	}
	if count != 10 {
		t.Fatalf("list holds %d nodes, map %d", count, len(sh.m))
	}
}
