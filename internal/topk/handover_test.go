package topk

import (
	"reflect"
	"testing"
	"time"
)

// A ClientTop restored from another's snapshot reports what the other
// did, over every window, and goes on counting from there.
func TestSnapshotRestore(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	old := NewClientTop(3)
	for i, c := range []string{"a", "b", "a", "c", "d", "a", "b"} {
		old.Observe(c, i%3 == 0, uint64(100*i), 0, t0.Add(time.Duration(i)*2*time.Second))
	}
	now := t0.Add(15 * time.Second)
	snap := old.Snapshot(now)

	then := time.Unix(1_900_000_000, 0) // another process's clock
	next := NewClientTop(3)
	next.Restore(then, snap)
	if got, want := next.Top(then), old.Top(now); !reflect.DeepEqual(got, want) {
		t.Errorf("restored top = %+v, want %+v", got, want)
	}
	for _, by := range Dimensions {
		for _, w := range WindowNames {
			d, wi, err := Index(by, w)
			if err != nil {
				t.Fatal(err)
			}
			got, want := next.Report(d, wi, 3, 0, then), old.Report(d, wi, 3, 0, now)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s over %s: restored %+v, want %+v", by, w, got, want)
			}
		}
	}
	next.Observe("a", false, 0, 0, then)
	old.Observe("a", false, 0, 0, now)
	if got, want := next.Top(then), old.Top(now); !reflect.DeepEqual(got, want) {
		t.Errorf("after one more count: %+v, want %+v", got, want)
	}

	other := NewClientTop(4)
	other.Restore(then, snap) // another K: not taken
	if got := other.Top(then); len(got.Requests) != 0 {
		t.Errorf("a ClientTop of another K took the snapshot: %+v", got)
	}
	var none *ClientTop
	if none.Snapshot(now) != nil {
		t.Error("a nil ClientTop has a snapshot")
	}
	none.Restore(now, snap)
}
