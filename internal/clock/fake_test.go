package clock

import (
	"testing"
	"time"
)

var (
	_ Clock = Real{}
	_ Clock = (*Fake)(nil)
)

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fired reports whether t has fired, without blocking.
func fired(t Timer) (time.Time, bool) {
	select {
	case at := <-t.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeNowAdvances(t *testing.T) {
	f := NewFake(epoch)
	if got := f.Now(); !got.Equal(epoch) {
		t.Fatalf("Now() = %v, want %v", got, epoch)
	}
	f.Advance(1500 * time.Millisecond)
	if got, want := f.Now(), epoch.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}

func TestFakeTimerFiresAtDeadline(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(100 * time.Millisecond)
	if f.Pending() != 1 {
		t.Fatalf("Pending() = %d, want 1", f.Pending())
	}
	f.Advance(100*time.Millisecond - time.Nanosecond)
	if _, ok := fired(tm); ok {
		t.Fatal("timer fired 1ns before its deadline")
	}
	f.Advance(time.Nanosecond)
	at, ok := fired(tm)
	if !ok {
		t.Fatal("timer did not fire at its deadline")
	}
	if want := epoch.Add(100 * time.Millisecond); !at.Equal(want) {
		t.Fatalf("timer sent %v, want %v", at, want)
	}
	if f.Pending() != 0 {
		t.Fatalf("Pending() = %d after firing, want 0", f.Pending())
	}
	if tm.Stop() {
		t.Fatal("Stop() on a fired timer = true, want false")
	}
}

func TestFakeTimerFiresOnceWhenOvershot(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Hour)
	at, ok := fired(tm)
	if !ok {
		t.Fatal("timer did not fire")
	}
	if want := epoch.Add(time.Hour); !at.Equal(want) {
		t.Fatalf("timer sent %v, want the clock's time %v", at, want)
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm); ok {
		t.Fatal("timer fired twice")
	}
}

func TestFakeStopPreventsFiring(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(time.Second)
	keep := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop() on a pending timer = false, want true")
	}
	if tm.Stop() {
		t.Fatal("second Stop() = true, want false")
	}
	if f.Pending() != 1 {
		t.Fatalf("Pending() = %d, want 1", f.Pending())
	}
	f.Advance(2 * time.Second)
	if _, ok := fired(tm); ok {
		t.Fatal("stopped timer fired")
	}
	if _, ok := fired(keep); !ok {
		t.Fatal("the other timer did not fire")
	}
}

func TestFakeNonPositiveTimerFiresAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		f := NewFake(epoch)
		tm := f.NewTimer(d)
		if _, ok := fired(tm); !ok {
			t.Errorf("NewTimer(%v) did not fire at once", d)
		}
		if f.Pending() != 0 {
			t.Errorf("NewTimer(%v): Pending() = %d, want 0", d, f.Pending())
		}
		if tm.Stop() {
			t.Errorf("NewTimer(%v): Stop() = true, want false", d)
		}
	}
}

func TestFakeAdvanceFiresOnlyDueTimers(t *testing.T) {
	tests := []struct {
		advance time.Duration
		want    []bool // fired, per timer at 1s, 2s, 3s
	}{
		{0, []bool{false, false, false}},
		{time.Second, []bool{true, false, false}},
		{2*time.Second + time.Millisecond, []bool{true, true, false}},
		{3 * time.Second, []bool{true, true, true}},
	}
	for _, tt := range tests {
		f := NewFake(epoch)
		timers := []Timer{f.NewTimer(3 * time.Second), f.NewTimer(time.Second), f.NewTimer(2 * time.Second)}
		f.Advance(tt.advance)
		for i, d := range []int{1, 2, 0} { // timers in deadline order
			if _, ok := fired(timers[d]); ok != tt.want[i] {
				t.Errorf("Advance(%v): timer at %ds fired = %v, want %v", tt.advance, i+1, ok, tt.want[i])
			}
		}
		var wantPending int
		for _, w := range tt.want {
			if !w {
				wantPending++
			}
		}
		if f.Pending() != wantPending {
			t.Errorf("Advance(%v): Pending() = %d, want %d", tt.advance, f.Pending(), wantPending)
		}
	}
}

func TestFakeTimerCreated(t *testing.T) {
	f := NewFake(epoch)
	select {
	case <-f.TimerCreated():
		t.Fatal("TimerCreated fired before any timer was made")
	default:
	}
	go f.NewTimer(time.Second)
	<-f.TimerCreated() // blocks until the goroutine made its timer
	if f.Pending() != 1 {
		t.Fatalf("Pending() = %d, want 1", f.Pending())
	}
}
