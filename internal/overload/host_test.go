package overload

import (
	"math"
	"runtime"
	"strconv"
	"testing"
	"testing/fstest"
)

func procStat(user, nice, system, idle, iowait, irq, softirq, steal int) string {
	return "cpu  " + itoa(user) + " " + itoa(nice) + " " + itoa(system) + " " + itoa(idle) + " " + itoa(iowait) +
		" " + itoa(irq) + " " + itoa(softirq) + " " + itoa(steal) + " 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestHostCPUCountsSoftirq(t *testing.T) {
	fsys := fstest.MapFS{"proc/stat": {Data: []byte(procStat(100, 0, 100, 800, 0, 0, 0, 0))}}
	h := NewHost(fsys, 4)
	// Next interval: 1000 ticks, of which 200 user, 100 system, 500 softirq
	// (a NIC interrupt storm), 100 iowait (idle), 100 idle.
	fsys["proc/stat"] = &fstest.MapFile{Data: []byte(procStat(300, 0, 200, 900, 100, 0, 500, 0))}
	if got := h.Sample().CPU; !near(got, 0.8) {
		t.Errorf("cpu = %v, want 0.8 (softirq is busy, iowait is idle)", got)
	}
	// Counters that did not move: unknown, not 0 or 1.
	if got := h.Sample().CPU; !math.IsNaN(got) {
		t.Errorf("cpu with no ticks = %v, want NaN", got)
	}
}

func TestHostLoadPerCPU(t *testing.T) {
	fsys := fstest.MapFS{"proc/loadavg": {Data: []byte("6.00 3.10 1.00 2/345 6789\n")}}
	if got := NewHost(fsys, 4).Sample().Load; !near(got, 1.5) {
		t.Errorf("load = %v, want 6/4", got)
	}
}

func TestHostMemory(t *testing.T) {
	meminfo := []byte("MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n")
	tests := []struct {
		name string
		fs   fstest.MapFS
		want float64
	}{
		{"no cgroup: meminfo", fstest.MapFS{"proc/meminfo": {Data: meminfo}}, 0.75},
		{"cgroup without a limit: meminfo", fstest.MapFS{
			"proc/meminfo":     {Data: meminfo},
			"proc/self/cgroup": {Data: []byte("0::/system.slice/levee.service\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.max":     {Data: []byte("max\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.current": {Data: []byte("500\n")},
		}, 0.75},
		{"cgroup limit, working set", fstest.MapFS{
			"proc/meminfo":     {Data: meminfo},
			"proc/self/cgroup": {Data: []byte("0::/system.slice/levee.service\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.max":     {Data: []byte("1000\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.current": {Data: []byte("900\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.stat":    {Data: []byte("anon 500\ninactive_file 300\nactive_file 100\n")},
		}, 0.6},
		{"the tightest ancestor", fstest.MapFS{
			"proc/self/cgroup": {Data: []byte("0::/system.slice/levee.service\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.max":     {Data: []byte("max\n")},
			"sys/fs/cgroup/system.slice/memory.max":                   {Data: []byte("2000\n")},
			"sys/fs/cgroup/system.slice/memory.current":               {Data: []byte("1800\n")},
			"sys/fs/cgroup/system.slice/levee.service/memory.current": {Data: []byte("100\n")},
		}, 0.9},
		{"nothing readable", fstest.MapFS{}, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewHost(tt.fs, 1).Sample().Memory
			if !(near(got, tt.want) || math.IsNaN(got) && math.IsNaN(tt.want)) {
				t.Errorf("memory = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHostGoroutinesAndGC(t *testing.T) {
	h := NewHost(fstest.MapFS{}, 1)
	runtime.GC() // at least one pause since NewHost
	s := h.Sample()
	if s.Goroutines < 1 {
		t.Errorf("goroutines = %d", s.Goroutines)
	}
	if s.GCPause <= 0 {
		t.Errorf("gc pause = %v after a GC, want > 0", s.GCPause)
	}
	if got := h.Missing(s); len(got) != 3 {
		t.Errorf("Missing = %v, want cpu, load and memory on an empty fs", got)
	}
}
