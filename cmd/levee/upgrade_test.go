package main

// Upgrades, as an operator runs them: SIGUSR2, POST /upgrade and `levee
// upgrade` on a real levee process, under load. Every generation of levee
// writes to one log file (the new one inherits the old one's stderr), so
// the test learns each new process's PID from it.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/instance"
	"github.com/leveeproxy/levee/internal/upgrade"
)

// upgradeLevee is a levee whose generations share one log file.
type upgradeLevee struct {
	t      *testing.T
	config string
	lock   string
	log    string // the log file every generation writes to
	first  *exec.Cmd
	exited chan struct{} // the first generation has exited
	proxy  string        // http://host:port, the same for every generation
	listen []string      // every listener's host:port, in the config's order
	admin  string
	pid    atomic.Int64 // the generation serving now
}

// upgradeToken is the admin token of the upgrade tests' levee: naming a
// binary in POST /upgrade takes one.
const upgradeToken = "upgrade-test-token"

// upgradeConfig is one app "a" in front of backend with the given extra
// app keys, its lock at lock, its admin token in upgradeTokenFile(lock).
func upgradeConfig(backend, lock, extra string) string {
	return fmt.Sprintf(`%s
admin: {addr: 127.0.0.1:0, token_file: %s}
instance: {lock: %s}
server: {%sdrain_timeout: 5s}
apps:
  a:
    hosts: [a.test]
    backends: [%s]
%s`, listenLine(), upgradeTokenFile(lock), lock, engineServer(), backend, extra)
}

// engineServer is the server key that puts the proxy listener on
// fasthttp's goroutine per connection when protoEnv is fasthttp
// (LEVEE_TEST_PROTO=fasthttp go test -run Upgrade ./cmd/levee); by
// default it is on the event loops, whose accepting the handover pauses.
func engineServer() string {
	if os.Getenv(protoEnv) == "fasthttp" {
		return "event_loop: false, "
	}
	return ""
}

// upgradeTokenFile is the admin token's file, beside the lock.
func upgradeTokenFile(lock string) string { return filepath.Join(filepath.Dir(lock), "admin.token") }

func startUpgradable(t *testing.T, backend, extra string, env ...string) *upgradeLevee {
	t.Helper()
	return startUpgradableWith(t, func(lock string) string { return upgradeConfig(backend, lock, extra) }, env...)
}

// startUpgradableWith starts a levee on the config that config returns
// for the lock file it is given.
func startUpgradableWith(t *testing.T, config func(lock string) string, env ...string) *upgradeLevee {
	t.Helper()
	dir := t.TempDir()
	u := &upgradeLevee{t: t, config: filepath.Join(dir, "levee.yaml"), lock: filepath.Join(dir, "levee.lock"),
		log: filepath.Join(dir, "levee.log"), exited: make(chan struct{})}
	if err := os.WriteFile(upgradeTokenFile(u.lock), []byte(upgradeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, u.config, config(u.lock))
	out, err := os.Create(u.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the process has its own copy
	u.first = exec.Command(leveeBin, "serve", "--config", u.config)
	u.first.Env = append(testEnv(t), env...)
	// A file, not a pipe: Wait returns at this process's exit, not at the
	// exit of the last process that inherited the descriptor.
	u.first.Stdout, u.first.Stderr = out, out
	if err := u.first.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.first.Wait(); close(u.exited) }()
	t.Cleanup(u.stop)
	m := u.waitLog(regexp.MustCompile(`msg="levee serving" listen="?\[([^\]]+)\]"? admin=(\S+) .*pid=(\d+)`), 1)
	u.listen = strings.Fields(m[1])
	u.proxy, u.admin = "http://"+u.listen[0], "http://"+m[2]
	pid, _ := strconv.Atoi(m[3])
	u.pid.Store(int64(pid))
	return u
}

// stop kills the generation serving now (by its PID: a process this test
// started, through its parent) and waits for every generation to exit.
// The last one the log names as taking over is killed too: upgrades the
// test did not follow (a drill's) leave u.pid behind.
func (u *upgradeLevee) stop() {
	pids := []int{int(u.pid.Load())}
	if all := handedOverLine.FindAllStringSubmatch(u.text(), -1); len(all) > 0 {
		last, _ := strconv.Atoi(all[len(all)-1][1])
		pids = append(pids, last)
	}
	for _, pid := range pids {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			u.waitExit(pid)
		}
	}
	_ = u.first.Process.Kill()
	<-u.exited
	if text := u.text(); strings.Contains(text, "WARNING: DATA RACE") {
		u.t.Errorf("levee reported a data race:\n%s", text)
	}
}

func (u *upgradeLevee) text() string {
	b, _ := os.ReadFile(u.log)
	return string(b)
}

func (u *upgradeLevee) fatalf(format string, args ...any) {
	u.t.Helper()
	u.t.Fatalf("%s\n--- levee log:\n%s", fmt.Sprintf(format, args...), u.text())
}

// waitLog waits until re has matched n times in the log, and returns the
// submatches of the nth.
func (u *upgradeLevee) waitLog(re *regexp.Regexp, n int) []string {
	u.t.Helper()
	return u.waitLogWithin(re, n, waitTimeout)
}

// upgradeWait bounds the wait for an upgrade's outcome: past the old
// levee's own bound on each step (upgrade.DefaultTimeout), so that an
// upgrade that fails says why in the log before the test gives up, and a
// slow start on a loaded CI machine is not taken for a failure.
const upgradeWait = upgrade.DefaultTimeout + 10*time.Second

func (u *upgradeLevee) waitLogWithin(re *regexp.Regexp, n int, d time.Duration) []string {
	u.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if all := re.FindAllStringSubmatch(u.text(), -1); len(all) >= n {
			return all[n-1]
		}
		if time.Now().After(deadline) {
			u.fatalf("the log did not show %q %d times within %v", re, n, d)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not an ordering sleep
	}
}

// waitExit waits until process pid has exited (a zombie has).
func (u *upgradeLevee) waitExit(pid int) {
	u.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !exited(pid) {
		if time.Now().After(deadline) {
			u.fatalf("process %d did not exit within %v", pid, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

var handedOverLine = regexp.MustCompile(`msg="upgrade: the new levee serves; draining and exiting" trigger=\S+ pid=(\d+)`)

// upgraded waits for the nth handover in the log, then for the old
// generation's exit, and returns the new generation's PID.
func (u *upgradeLevee) upgraded(n int) int {
	u.t.Helper()
	old := int(u.pid.Load())
	m := u.waitLogWithin(handedOverLine, n, upgradeWait)
	pid, _ := strconv.Atoi(m[1])
	u.pid.Store(int64(pid))
	u.waitExit(old)
	return pid
}

func (u *upgradeLevee) post(path, body string) (int, string) {
	u.t.Helper()
	req, err := http.NewRequest("POST", u.admin+path, strings.NewReader(body))
	if err != nil {
		u.fatalf("POST %s: %v", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+upgradeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		u.fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lockWatch tries to take the instance lock, over and over, while
// upgrades run: no attempt may succeed (it is never held by none), and
// /proc/locks must show exactly one lock on the file (never two).
type lockWatch struct {
	stop    chan struct{}
	done    chan struct{}
	tries   atomic.Int64
	failure atomic.Pointer[string]
}

func watchLock(t *testing.T, path string) *lockWatch {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	w := &lockWatch{stop: make(chan struct{}), done: make(chan struct{})}
	buf := make([]byte, 1<<20) // more than /proc/locks holds: one read
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			l, err := instance.TryAcquire(path)
			var held *instance.HeldError
			if !errors.As(err, &held) {
				l.Release()
				w.fail(fmt.Sprintf("a third process took the lock, or could not be told it was held: %v", err))
				return
			}
			if n := flocksOn(st, buf); n != 1 {
				w.fail(fmt.Sprintf("/proc/locks shows %d locks on the lock file, want 1", n))
				return
			}
			w.tries.Add(1)
			time.Sleep(time.Millisecond) // poll interval: two cores are shared
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *lockWatch) fail(s string) { w.failure.CompareAndSwap(nil, &s) }

func (w *lockWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// flocksOn counts the FLOCK entries of /proc/locks on the file st is of:
// its device and inode, as /proc/locks names them (major and minor in
// hex), so that another file's lock with the same inode number on another
// file system (another test's, on tmpfs) is not counted.
//
// It counts holders (the PIDs on those lines), not lines, and looks again
// when it finds none. The kernel prints the list a page per read(2), by
// position, and another process's lock taken or released between two
// reads shifts it: a line can come twice or not at all. CI saw "2 locks
// on the lock file" while one process held it, with the machine's other
// tests taking many locks; a real second holder is another PID.
func flocksOn(st *syscall.Stat_t, buf []byte) int {
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	file := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	holders := -1
	for range 3 {
		b, err := readWhole("/proc/locks", buf)
		if err != nil {
			return -1
		}
		pids := map[string]bool{}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			// "1: FLOCK  ADVISORY  WRITE 4242 08:02:1234 0 EOF"
			if len(f) >= 6 && f[1] == "FLOCK" && f[5] == file {
				pids[f[4]] = true
			}
		}
		if holders = len(pids); holders != 0 {
			break
		}
	}
	return holders
}

// readWhole reads a proc file into buf, in as few reads as its pages take.
func readWhole(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := 0
	for {
		if n == len(buf) {
			return nil, errors.New(path + " is larger than the buffer")
		}
		m, err := f.Read(buf[n:])
		n += m
		if err == io.EOF || m == 0 && err == nil {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// load sends requests from a few clients until stopped: half keep their
// connections alive, half open a new one per request; each client sends
// one every pace (0: as fast as answers come). Every answer must be whole
// and one of those good accepts.
type load struct {
	ok, bad atomic.Int64
	mu      sync.Mutex
	errs    []string
	stop    chan struct{}
	wg      sync.WaitGroup
	tick    chan int // the status of an answer, dropped when no one waits
}

func startLoad(t *testing.T, proxy, want string, clients int) *load {
	t.Helper()
	return startPacedLoad(t, proxy, clients, 0, func(code int, body string) bool { return code == 200 && body == want })
}

func startPacedLoad(t *testing.T, proxy string, clients int, pace time.Duration, good func(code int, body string) bool) *load {
	t.Helper()
	l := &load{stop: make(chan struct{}), tick: make(chan int)}
	for i := range clients {
		tr := &http.Transport{DisableKeepAlives: i%2 == 1, MaxIdleConnsPerHost: 1}
		if testH2C() && i%2 == 0 { // the keep-alive half over h2c: the drain ends them with GOAWAY
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		c := &http.Client{Transport: tr, Timeout: waitTimeout}
		l.wg.Go(func() {
			defer tr.CloseIdleConnections()
			var every <-chan time.Time
			if pace > 0 {
				tk := time.NewTicker(pace) // the offered load's pace, not an ordering
				defer tk.Stop()
				every = tk.C
			}
			for {
				if every != nil {
					select {
					case <-l.stop:
						return
					case <-every:
					}
				} else {
					select {
					case <-l.stop:
						return
					default:
					}
				}
				req, _ := http.NewRequest(http.MethodGet, proxy+"/", nil)
				req.Host = "a.test"
				code, body, err := do(c, req)
				if err != nil || !good(code, body) {
					l.bad.Add(1)
					l.mu.Lock()
					l.errs = append(l.errs, fmt.Sprintf("%d %q %v", code, body, err))
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
				select {
				case l.tick <- code:
				default:
				}
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

// answeredWith waits until an answer has had status code.
func (l *load) answeredWith(t *testing.T, code int) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case c := <-l.tick:
			if c == code {
				return
			}
		case <-deadline.C:
			t.Fatalf("no answer had status %d within %v (ok %d, bad %d)", code, waitTimeout, l.ok.Load(), l.bad.Load())
		}
	}
}

// answered waits until n more requests have been answered.
func (l *load) answered(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for range n {
		select {
		case <-l.tick:
		case <-deadline.C:
			t.Fatalf("the load got fewer than %d answers within %v (ok %d, bad %d)", n, waitTimeout, l.ok.Load(), l.bad.Load())
		}
	}
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// TestUpgradeUnderLoad: a levee upgraded several times in a row
// (LEVEE_TEST_UPGRADES, 4 by default), by SIGUSR2 and by POST /upgrade,
// under keep-alive (HTTP/1.1, or h2c in the h2c run) and fresh-connection
// load, never refuses or resets a connection nor truncates an answer; the
// lock is always held, by one lock; each old process exits.
func TestUpgradeUnderLoad(t *testing.T) {
	u := startUpgradable(t, namedBackend(t, "one"), "")
	w := watchLock(t, u.lock)
	l := startLoad(t, u.proxy, "one", 4)
	l.answered(t, 50)
	upgrades := 4
	if n, err := strconv.Atoi(os.Getenv("LEVEE_TEST_UPGRADES")); err == nil && n > 0 {
		upgrades = n // the 20, by hand: LEVEE_TEST_UPGRADES=20
	}
	for i := 1; i <= upgrades; i++ {
		old := int(u.pid.Load())
		if i%2 == 1 {
			if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
		} else if code, body := u.post("/upgrade", ""); code != 200 || !strings.Contains(body, `"ok":true`) {
			u.fatalf("POST /upgrade = %d %s", code, body)
		}
		pid := u.upgraded(i)
		if pid == old {
			u.fatalf("upgrade %d: the new levee has the old one's PID %d", i, pid)
		}
		l.answered(t, 50) // served by the new generation, the old one gone
	}
	l.end()
	w.end()
	if f := w.failure.Load(); f != nil {
		u.fatalf("instance lock: %s", *f)
	}
	if l.bad.Load() > 0 {
		u.fatalf("%d of %d requests failed across %d upgrades; first: %v", l.bad.Load(), l.bad.Load()+l.ok.Load(), upgrades, l.errs[:min(5, len(l.errs))])
	}
	if w.tries.Load() == 0 {
		t.Fatal("the lock watch never ran")
	}
	// The lock names the generation serving now.
	b, _ := os.ReadFile(u.lock)
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(int(u.pid.Load())) {
		u.fatalf("lock file names %q, want the serving levee %d", got, u.pid.Load())
	}
	t.Logf("%d requests over %d upgrades, %d lock checks", l.ok.Load(), upgrades, w.tries.Load())
}

// TestFailedUpgradeKeepsTheOldServing: a new config that does not
// validate, and a new binary that exits at once, each leave the old levee
// serving (same PID, same lock), with the reason in the answer and the log.
func TestFailedUpgradeKeepsTheOldServing(t *testing.T) {
	backend := namedBackend(t, "one")
	u := startUpgradable(t, backend, "")
	pid := int(u.pid.Load())
	l := startLoad(t, u.proxy, "one", 2)
	l.answered(t, 20)

	writeConfig(t, u.config, upgradeConfig(backend, u.lock, "    limits: {rate: -5/s}\n"))
	code, body := u.post("/upgrade", "")
	if code != http.StatusBadGateway || !strings.Contains(body, "could not start") || !strings.Contains(body, "rate") {
		u.fatalf("upgrade to a bad config: %d %s; want 502 naming the problem", code, body)
	}
	u.waitLog(regexp.MustCompile(`upgrade failed; this levee keeps serving`), 1)
	l.answered(t, 20)

	writeConfig(t, u.config, upgradeConfig(backend, u.lock, ""))
	code, body = u.post("/upgrade", `{"binary": "/bin/false"}`)
	if code != http.StatusBadGateway || !strings.Contains(body, "exited before serving") {
		u.fatalf("upgrade to a binary that exits: %d %s; want 502 saying it exited", code, body)
	}
	u.waitLog(regexp.MustCompile(`upgrade failed; this levee keeps serving`), 2)
	l.answered(t, 20)

	// SIGUSR2 with the bad config: refused the same way, said in the log.
	writeConfig(t, u.config, upgradeConfig(backend, u.lock, "    limits: {rate: -5/s}\n"))
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	u.waitLog(regexp.MustCompile(`upgrade failed; this levee keeps serving`), 3)
	l.answered(t, 20)

	l.end()
	if l.bad.Load() > 0 {
		u.fatalf("%d requests failed across failed upgrades; first: %v", l.bad.Load(), l.errs[:min(5, len(l.errs))])
	}
	if exited(pid) {
		u.fatalf("the old levee %d exited", pid)
	}
	b, _ := os.ReadFile(u.lock)
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(pid) {
		u.fatalf("lock file names %q, want the old levee %d", got, pid)
	}
	if _, err := instance.TryAcquire(u.lock); err == nil {
		u.fatalf("the lock was free after failed upgrades")
	}
}

// TestUpgradeCommand: `levee upgrade` upgrades by SIGUSR2 when the admin
// address is not fixed, and through the admin API with --admin; it exits
// 1 with the reason when the new config is bad, and the old levee serves on.
func TestUpgradeCommand(t *testing.T) {
	backend := namedBackend(t, "one")
	u := startUpgradable(t, backend, "")
	l := startLoad(t, u.proxy, "one", 2)
	l.answered(t, 20)

	code, stdout, stderr := runLevee(t, "upgrade", "--config", u.config)
	pid := u.upgraded(1)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("process %d serves", pid)) {
		u.fatalf("levee upgrade (signal) = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	l.answered(t, 20)

	code, stdout, stderr = runLevee(t, "upgrade", "--config", u.config, "--admin", u.admin, "--binary", leveeBin)
	pid = u.upgraded(2)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("process %d serves", pid)) {
		u.fatalf("levee upgrade --admin = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	l.answered(t, 20)

	writeConfig(t, u.config, upgradeConfig(backend, u.lock, "    limits: {rate: -5/s}\n"))
	code, _, stderr = runLevee(t, "upgrade", "--config", u.config, "--admin", u.admin)
	if code != 1 || !strings.Contains(stderr, "limits") {
		u.fatalf("levee upgrade to a bad config = %d, stderr: %s; want 1 naming the problem", code, stderr)
	}
	l.answered(t, 20)
	l.end()
	if l.bad.Load() > 0 {
		u.fatalf("%d requests failed; first: %v", l.bad.Load(), l.errs[:min(5, len(l.errs))])
	}
}

// arrivals is a backend that notes when each request reaches it, once
// recording has begun.
type arrivals struct {
	mu        sync.Mutex
	recording bool
	at        []time.Time
}

func (a *arrivals) backend(t *testing.T) string {
	t.Helper()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		if a.recording {
			a.at = append(a.at, time.Now())
		}
		a.mu.Unlock()
		io.WriteString(w, "one")
	}))
	t.Cleanup(b.Close)
	return b.Listener.Addr().String()
}

func (a *arrivals) record() {
	a.mu.Lock()
	a.recording = true
	a.mu.Unlock()
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// since counts the arrivals from the first one recorded until until,
// and returns how long that is.
func (a *arrivals) since(until time.Time) (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.at) == 0 {
		return 0, 0
	}
	n := 0
	for _, t := range a.at {
		if !t.After(until) {
			n++
		}
	}
	return n, until.Sub(a.at[0])
}

// TestUpgradeKeepsTheRateLimit: under load over its limit, an app limited
// to 50/s with a burst of 25 gets at most 50/s (+2%) to its backend over
// every window that starts with its bucket empty and spans upgrades: the
// new levee takes the buckets over (an upgrade that started them full
// would let a burst of 25 more through each time), and what the old one
// still admits is charged to it. (Windows that start anywhere would also
// count what GCRA rightly lets through after the traffic stalls: the
// total of a window that starts with the bucket empty does not.)
func TestUpgradeKeepsTheRateLimit(t *testing.T) {
	var arr arrivals
	u := startUpgradable(t, arr.backend(t), "    limits: {rate: 50/s, burst: 25}\n")
	l := startPacedLoad(t, u.proxy, 2, 4*time.Millisecond, func(code int, body string) bool {
		return code == 200 && body == "one" || code == http.StatusTooManyRequests
	})
	l.answeredWith(t, http.StatusTooManyRequests) // the burst is spent: the bucket is empty from here
	arr.record()
	const upgrades = 3
	var ends []time.Time // each window ends a second after an upgrade
	for i := 1; i <= upgrades; i++ {
		if err := syscall.Kill(int(u.pid.Load()), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		u.upgraded(i)
		for n := arr.count() + 50; arr.count() < n; { // a second of admissions by the new levee
			l.answeredWith(t, 200)
		}
		ends = append(ends, time.Now())
	}
	l.end()
	if l.bad.Load() > 0 {
		u.fatalf("%d requests failed; first: %v", l.bad.Load(), l.errs[:min(5, len(l.errs))])
	}
	for i, end := range ends {
		n, d := arr.since(end)
		// GCRA from an empty bucket admits d/interval + 1; the first
		// arrival recorded may have had one more. 2% more allowed.
		limit := int(50*d.Seconds()*1.02) + 2
		if n > limit {
			u.fatalf("%d requests reached the backend in the %v spanning %d upgrades; the limit allows %d", n, d.Round(time.Millisecond), i+1, limit)
		}
		t.Logf("%d upgrades: %d requests in %v (limit %d)", i+1, n, d.Round(time.Millisecond), limit)
	}
}

// TestUpgradeKeepsTheConcurrency: an app with a concurrency of 4, under
// more load than that, never has more than 4 requests at its backend
// while upgrades hand over: the new levee holds a slot for each request
// the old one still has in flight, until the old one reports it done.
func TestUpgradeKeepsTheConcurrency(t *testing.T) {
	var inflight, most atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(30 * time.Millisecond) // the backend's work: requests overlap the handover
		io.WriteString(w, "one")
	}))
	t.Cleanup(b.Close)
	u := startUpgradable(t, b.Listener.Addr().String(), "    limits: {concurrency: 4, queue: {max_len: 64, max_wait: 5s}}\n")
	l := startPacedLoad(t, u.proxy, 8, 0, func(code int, body string) bool {
		return code == 200 && body == "one" || code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests
	})
	l.answeredWith(t, 200)
	for i := 1; i <= 3; i++ {
		if err := syscall.Kill(int(u.pid.Load()), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		u.upgraded(i)
		for range 20 {
			l.answeredWith(t, 200)
		}
	}
	l.end()
	if l.bad.Load() > 0 {
		u.fatalf("%d requests failed; first: %v", l.bad.Load(), l.errs[:min(5, len(l.errs))])
	}
	if m := most.Load(); m > 4 {
		u.fatalf("the backend had %d requests in flight at once; the app's concurrency is 4", m)
	} else if m < 4 {
		t.Fatalf("the backend never had more than %d in flight: the load did not reach the limit", m)
	}
}

// TestUpgradeMovesMainPID: under systemd (Type=notify), an upgrade says
// RELOADING=1, then hands the unit's main PID to the new levee with
// READY=1 once it serves; neither the new levee before that nor the old
// one after it says anything (neither is the main process then, and
// NotifyAccess=main would drop it).
func TestUpgradeMovesMainPID(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	next := func() string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(waitTimeout))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	u := startUpgradable(t, namedBackend(t, "one"), "", "NOTIFY_SOCKET="+sock)
	if got := next(); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if err := syscall.Kill(int(u.pid.Load()), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if got := next(); !strings.HasPrefix(got, "RELOADING=1") {
		t.Fatalf("notification %q, want RELOADING=1", got)
	}
	pid := u.upgraded(1)
	want := fmt.Sprintf("MAINPID=%d\nREADY=1\n", pid)
	if got := next(); !strings.HasPrefix(got, want) {
		t.Fatalf("notification %q, want it to start %q", got, want)
	}
	// The old levee has exited (upgraded waited for it): it said no more.
	c.SetReadDeadline(time.Now())
	if n, err := c.Read(make([]byte, 4096)); err == nil {
		t.Fatalf("the old levee said more after handing over (%d bytes): systemd would drop it", n)
	}
}
