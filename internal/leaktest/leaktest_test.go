package leaktest

import (
	"strings"
	"testing"
	"time"
)

// fakeT records what Check reports, and runs its cleanups on demand.
type fakeT struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, _ ...any) { f.errs = append(f.errs, format) }

func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestCheckPassesWhenGoroutinesEnd(t *testing.T) {
	ft := &fakeT{TB: t}
	Check(ft)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { <-stop; close(done) }()
	close(stop)
	<-done
	ft.end()
	if len(ft.errs) != 0 {
		t.Fatalf("reported %v for a goroutine that ended", ft.errs)
	}
}

func TestCheckReportsALeak(t *testing.T) {
	ft := &fakeT{TB: t}
	check(ft, 50*time.Millisecond)
	stop := make(chan struct{})
	defer close(stop)
	go func() { <-stop }()
	ft.end()
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "still run") {
		t.Fatalf("reported %v for a goroutine left running, want one error", ft.errs)
	}
}

func TestIDOf(t *testing.T) {
	for in, want := range map[string]int{"goroutine 17 [running]:\nmain.main()": 17, "goroutine x [": -1, "nothing": -1} {
		id, ok := idOf(in)
		if (want < 0) == ok || (ok && id != want) {
			t.Errorf("idOf(%q) = %d, %v; want %d", in, id, ok, want)
		}
	}
}
