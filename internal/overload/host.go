package overload

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Host samples the machine levee runs on from /proc and /sys (Linux) and
// the Go runtime. A reading that fails (another OS, a missing file) is NaN:
// that signal stays cool, and Missing says which. Create it with NewHost;
// Sample must be called by one goroutine at a time.
type Host struct {
	fs   fs.FS // the root file system: "proc/stat", "sys/fs/cgroup/..."
	ncpu int

	prevBusy, prevTotal uint64 // /proc/stat counters at the previous sample
	gc                  []metrics.Sample
	prevPauses          []uint64 // GC pause histogram counts at the previous sample
}

// gcPauses is the runtime's histogram of stop-the-world GC pauses.
const gcPauses = "/sched/pauses/total/gc:seconds"

// NewHost returns a Host reading root (os.DirFS("/") in production) and
// dividing the load average by ncpu (runtime.NumCPU() if ≤ 0).
func NewHost(root fs.FS, ncpu int) *Host {
	if ncpu <= 0 {
		ncpu = runtime.NumCPU()
	}
	h := &Host{fs: root, ncpu: ncpu, gc: []metrics.Sample{{Name: gcPauses}}}
	h.cpu() // the first CPU reading is a baseline
	h.gcPause()
	return h
}

// NewSystemHost returns a Host on the real machine.
func NewSystemHost() *Host { return NewHost(os.DirFS("/"), 0) }

// Sample reads every signal.
func (h *Host) Sample() Sample {
	return Sample{
		CPU:        h.cpu(),
		Load:       h.load(),
		Memory:     h.memory(),
		Goroutines: runtime.NumGoroutine(),
		GCPause:    h.gcPause(),
	}
}

// Missing names the float signals the host cannot read, for one log line.
func (h *Host) Missing(s Sample) []string {
	var out []string
	for _, m := range []struct {
		name string
		v    float64
	}{{"cpu", s.CPU}, {"load", s.Load}, {"memory", s.Memory}} {
		if math.IsNaN(m.v) {
			out = append(out, m.name)
		}
	}
	return out
}

// cpu returns the busy share since the previous call (NaN the first time).
func (h *Host) cpu() float64 {
	busy, total, ok := readProcStat(h.fs)
	if !ok {
		return math.NaN()
	}
	prevBusy, prevTotal := h.prevBusy, h.prevTotal
	h.prevBusy, h.prevTotal = busy, total
	if prevTotal == 0 || total <= prevTotal || busy < prevBusy || busy-prevBusy > total-prevTotal {
		return math.NaN() // the baseline, or counters that went backwards
	}
	db, dt := busy-prevBusy, total-prevTotal
	return float64(db) / float64(dt)
}

// readProcStat returns the aggregate busy and total CPU time (in ticks)
// from /proc/stat's first line: user nice system idle iowait irq softirq
// steal. Guest time is already inside user and nice; iowait is idle.
func readProcStat(root fs.FS) (busy, total uint64, ok bool) {
	data, err := fs.ReadFile(root, "proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	busy = user + nice + system + irq + softirq + steal
	return busy, busy + idle + iowait, true
}

// load returns the 1-minute load average per CPU.
func (h *Host) load() float64 {
	data, err := fs.ReadFile(h.fs, "proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return math.NaN()
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return l / float64(h.ncpu)
}

// memory returns the used share of the tightest cgroup v2 memory limit on
// levee's cgroup path (working set: memory.current less inactive file
// pages, which the kernel reclaims first), or, without a limit, of the
// host's memory (1 − MemAvailable/MemTotal).
func (h *Host) memory() float64 {
	if v, ok := cgroupMemory(h.fs); ok {
		return v
	}
	return meminfo(h.fs)
}

// cgroupMemory finds levee's cgroup from /proc/self/cgroup and reads it and
// its ancestors; it reports false when none has a memory.max limit.
func cgroupMemory(root fs.FS) (float64, bool) {
	data, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var rel string
	found := false
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel, found = strings.Trim(p, "/"), true
			break
		}
	}
	if !found {
		return 0, false // cgroup v1 only
	}
	best, ok := 0.0, false
	for {
		dir := "sys/fs/cgroup"
		if rel != "" {
			dir += "/" + rel
		}
		if share, limited := cgroupShare(root, dir); limited && (!ok || share > best) {
			best, ok = share, true
		}
		if rel == "" {
			return best, ok
		}
		if i := strings.LastIndexByte(rel, '/'); i >= 0 {
			rel = rel[:i]
		} else {
			rel = ""
		}
	}
}

// cgroupShare reads one cgroup's working set over its memory.max.
func cgroupShare(root fs.FS, dir string) (float64, bool) {
	maxData, err := fs.ReadFile(root, dir+"/memory.max")
	if err != nil {
		return 0, false
	}
	limit, err := strconv.ParseUint(strings.TrimSpace(string(maxData)), 10, 64)
	if err != nil || limit == 0 { // "max": no limit here
		return 0, false
	}
	cur, err := fs.ReadFile(root, dir+"/memory.current")
	if err != nil {
		return 0, false
	}
	used, err := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
	if err != nil {
		return 0, false
	}
	if stat, err := fs.ReadFile(root, dir+"/memory.stat"); err == nil {
		if inactive, ok := statField(stat, "inactive_file"); ok && inactive <= used {
			used -= inactive
		}
	}
	return float64(used) / float64(limit), true
}

// statField finds "name value" in a memory.stat or meminfo style file.
func statField(data []byte, name string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && strings.TrimSuffix(f[0], ":") == name {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// meminfo returns 1 − MemAvailable/MemTotal from /proc/meminfo.
func meminfo(root fs.FS) float64 {
	data, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return math.NaN()
	}
	total, ok1 := statField(data, "MemTotal")
	avail, ok2 := statField(data, "MemAvailable")
	if !ok1 || !ok2 || total == 0 || avail > total {
		return math.NaN()
	}
	return 1 - float64(avail)/float64(total)
}

// gcPause returns the longest GC pause since the previous call: the upper
// bound of the highest histogram bucket that gained a count (its lower
// bound when the upper one is +Inf).
func (h *Host) gcPause() time.Duration {
	metrics.Read(h.gc)
	if h.gc[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	hist := h.gc[0].Value.Float64Histogram()
	var longest time.Duration
	for i := len(hist.Counts) - 1; i >= 0; i-- {
		prev := uint64(0)
		if i < len(h.prevPauses) {
			prev = h.prevPauses[i]
		}
		if hist.Counts[i] > prev && h.prevPauses != nil {
			bound := hist.Buckets[i+1]
			if math.IsInf(bound, 1) {
				bound = hist.Buckets[i]
			}
			longest = time.Duration(bound * float64(time.Second))
			break
		}
	}
	h.prevPauses = append(h.prevPauses[:0], hist.Counts...)
	return longest
}
