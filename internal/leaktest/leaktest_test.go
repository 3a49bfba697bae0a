package leaktest

import (
	"os"
	"path/filepath"
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

func TestCheckFilesReportsAFileLeftOpen(t *testing.T) {
	if _, err := openFiles(); err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	ft := &fakeT{TB: t}
	checkFiles(ft, 50*time.Millisecond)
	closed, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	left, err := os.Create(filepath.Join(t.TempDir(), "left"))
	if err != nil {
		t.Fatal(err)
	}
	defer left.Close()
	ft.end()
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "still open") {
		t.Fatalf("reported %v for a file left open, want one error", ft.errs)
	}
	left.Close()
	ft = &fakeT{TB: t}
	CheckFiles(ft)
	ft.end()
	if len(ft.errs) != 0 {
		t.Fatalf("reported %v when nothing was opened", ft.errs)
	}
}

func TestGrowth(t *testing.T) {
	flat := []Usage{{Goroutines: 100, Files: 50, Heap: 10 << 20}, {Goroutines: 120, Files: 50, Heap: 12 << 20}}
	slack := Usage{Goroutines: 10, Files: 5, Heap: 1 << 20}
	for _, tc := range []struct {
		name  string
		later []Usage
		grew  []string
	}{
		{"the same", flat, nil},
		{"within tolerance and slack", []Usage{{Goroutines: 130, Files: 59, Heap: 13 << 20}}, nil},
		{"more goroutines", []Usage{{Goroutines: 200, Files: 50, Heap: 11 << 20}}, []string{"goroutines"}},
		{"everything", []Usage{{Goroutines: 200, Files: 70, Heap: 20 << 20}}, []string{"goroutines", "open files", "heap bytes"}},
	} {
		err := Growth(flat, tc.later, 0.1, slack)
		if (err != nil) != (len(tc.grew) > 0) {
			t.Errorf("%s: Growth = %v; want growth of %v", tc.name, err, tc.grew)
			continue
		}
		for _, r := range tc.grew {
			if !strings.Contains(err.Error(), r+":") {
				t.Errorf("%s: Growth = %v; want %s named", tc.name, err, r)
			}
		}
	}
	if Growth(nil, flat, 0.1, slack) == nil {
		t.Error("Growth without earlier samples reported none")
	}
}
