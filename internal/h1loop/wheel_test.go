package h1loop

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// expired runs w.expire up to now and returns the owners that came due.
func expired(w *wheel, now int64) []int {
	var got []int
	w.expire(now, func(o any) { got = append(got, o.(int)) })
	slices.Sort(got)
	return got
}

func TestWheelExpiresAtTheDeadline(t *testing.T) {
	w := newWheel(8, 100)
	es := make([]entry, 4)
	for i := range es {
		es[i].owner = i
	}
	w.set(&es[0], 101)
	w.set(&es[1], 103)
	w.set(&es[2], 103+8*3) // three turns ahead: in the same slot as es[1]
	w.set(&es[3], 105)
	if got := expired(w, 100); len(got) != 0 {
		t.Fatalf("at 100: %v came due", got)
	}
	if got := expired(w, 102); !slices.Equal(got, []int{0}) {
		t.Fatalf("at 102: %v, want [0]", got)
	}
	if got := expired(w, 103); !slices.Equal(got, []int{1}) {
		t.Fatalf("at 103: %v, want [1] (2 is three turns later)", got)
	}
	// Later: left in its slot, refiled when the slot comes round.
	w.set(&es[3], 110)
	if got := expired(w, 109); len(got) != 0 {
		t.Fatalf("at 109: %v came due after 3 moved to 110", got)
	}
	if got := expired(w, 110); !slices.Equal(got, []int{3}) {
		t.Fatalf("at 110: %v, want [3]", got)
	}
	// Earlier: refiled at once.
	w.set(&es[2], 112)
	if got := expired(w, 112); !slices.Equal(got, []int{2}) {
		t.Fatalf("at 112: %v, want [2]", got)
	}
}

func TestWheelRemoveAndNoDeadline(t *testing.T) {
	w := newWheel(4, 0)
	var a, b entry
	a.owner, b.owner = 1, 2
	w.set(&a, 2)
	w.set(&b, 2)
	w.set(&a, 0)
	w.remove(&b)
	w.remove(&b) // twice is harmless
	if got := expired(w, 10); len(got) != 0 {
		t.Fatalf("%v came due after removal", got)
	}
}

// TestWheelMatchesAModel sets, moves and removes random deadlines and
// checks each entry expires at the first pass at or after its deadline,
// and never twice.
func TestWheelMatchesAModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		slots := 1 + r.IntN(16)
		w := newWheel(slots, 0)
		es := make([]entry, 32)
		due := make([]int64, len(es)) // the model: 0 none
		for i := range es {
			es[i].owner = i
		}
		now := int64(0)
		for range 400 {
			switch i := r.IntN(len(es)); r.IntN(4) {
			case 0, 1:
				d := now + 1 + r.Int64N(int64(3*slots+3))
				w.set(&es[i], d)
				due[i] = d
			case 2:
				w.set(&es[i], 0)
				due[i] = 0
			case 3:
				now += 1 + r.Int64N(int64(2*slots+2))
				var want []int
				for j, d := range due {
					if d != 0 && d <= now {
						want = append(want, j)
						due[j] = 0
					}
				}
				got := expired(w, now)
				if !slices.Equal(got, want) {
					t.Fatalf("slots %d, at %d: expired %v, want %v", slots, now, got, want)
				}
			}
		}
	}
}
