package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveExisting runs `levee serve` on the config already at path (env: extra variables).
func serveExisting(t *testing.T, path string, env ...string) *serveProc {
	t.Helper()
	p := startLeveeEnv(t, env, "serve", "--config", path)
	m := p.waitOutput(p.stderr, servingLine)
	return &serveProc{proc: p, config: path, proxy: "http://" + m[1], admin: "http://" + m[2],
		client: &http.Client{Timeout: waitTimeout}}
}

// metric reads one series (name{labels} exactly as exposed) from /metrics.
func (s *serveProc) metric(series string) (float64, string) {
	code, body, err := s.adminDo(http.MethodGet, "/metrics")
	if err != nil || code != http.StatusOK {
		return 0, fmt.Sprintf("/metrics = %d %v", code, err)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, fmt.Sprintf("%s %v (%v)", series, f, err)
		}
	}
	return 0, series + " not exposed"
}

// waitMetric waits until series has value want.
func (s *serveProc) waitMetric(series string, want float64) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%s = %v", series, want), func() (bool, string) {
		v, last := s.metric(series)
		return v == want, last
	})
}

const (
	roleActive     = `levee_instance_role{role="active"}`
	roleUnexpected = `levee_instance_role{role="unexpected"}`
	limitA         = `levee_concurrency_limit{app="a"}`
)

// TestSecondInstanceRefuses: by default a second levee on the same config
// exits 1 naming the active one's PID, and the active one serves on.
func TestSecondInstanceRefuses(t *testing.T) {
	s := startServe(t, appConfig(namedBackend(t, "one"), ""))
	s.waitMetric(roleActive, 1)
	code, _, stderr := runLevee(t, "serve", "--config", s.config)
	if code != 1 {
		t.Fatalf("second instance exited %d, want 1; stderr:\n%s", code, stderr)
	}
	want := fmt.Sprintf("process %d holds the instance lock", s.cmd.Process.Pid)
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "refusing to start") {
		t.Errorf("second instance said:\n%s\nwant it to name the holder (%q) and refuse", stderr, want)
	}
	if code, body, err := s.get("a.test", "/"); err != nil || code != 200 || body != "one" {
		s.fatalf("active instance after the refusal: %d %q %v", code, body, err)
	}
}

// TestSecondInstanceStrictThenTakesOver: with unexpected: strict, the
// second levee serves with its limits scaled down and says so; when the
// active one exits, it takes the lock over and gets its full limits.
func TestSecondInstanceStrictThenTakesOver(t *testing.T) {
	cfg := "instance: {unexpected: strict, strict_fraction: 20%}\n" +
		appConfig(namedBackend(t, "one"), "    limits: {concurrency: 10}")
	first := startServe(t, cfg)
	first.waitMetric(limitA, 10)
	second := serveExisting(t, first.config)
	second.waitMetric(roleUnexpected, 1)
	second.waitMetric(roleActive, 0)
	second.waitMetric(limitA, 2)
	if !regexp.MustCompile(`level=WARN msg="another levee is active.*holder_pid=` + strconv.Itoa(first.cmd.Process.Pid)).MatchString(second.stderr.String()) {
		second.fatalf("no warning naming the active instance's PID %d", first.cmd.Process.Pid)
	}
	if code, body, err := second.get("a.test", "/"); err != nil || code != 200 || body != "one" {
		second.fatalf("unexpected instance does not serve: %d %q %v", code, body, err)
	}
	first.waitMetric(roleActive, 1)
	first.waitMetric(limitA, 10)

	first.signal(syscall.SIGTERM)
	if code := first.exitCode(); code != 0 {
		first.fatalf("exit %d after SIGTERM", code)
	}
	second.waitMetric(roleActive, 1)
	second.waitMetric(roleUnexpected, 0)
	second.waitMetric(limitA, 10)
	second.waitOutput(second.stderr, regexp.MustCompile(`msg="took over the instance lock`))
}

// TestLockHeldUntilDrained: the active instance keeps the lock through its
// drain, so a replacement started meanwhile is refused, and one started
// after it exits runs.
func TestLockHeldUntilDrained(t *testing.T) {
	b := newBlockingBackend(t)
	s := startServe(t, appConfig(b.addr, ""))
	inflight := make(chan error, 1)
	go func() {
		_, _, err := s.get("a.test", "/slow")
		inflight <- err
	}()
	select {
	case <-b.arrived:
	case <-time.After(waitTimeout):
		s.fatalf("backend did not receive the request")
	}
	s.signal(syscall.SIGTERM)
	s.eventually("draining", func() (bool, string) {
		code, _, err := s.adminDo(http.MethodGet, "/readyz")
		return err == nil && code == http.StatusServiceUnavailable, fmt.Sprintf("/readyz %d %v", code, err)
	})
	if code, _, stderr := runLevee(t, "serve", "--config", s.config); code != 1 || !strings.Contains(stderr, "holds the instance lock") {
		s.fatalf("a replacement during the drain exited %d:\n%s\nwant 1: the lock is held until the drain ends", code, stderr)
	}
	b.unblock()
	if err := <-inflight; err != nil {
		s.fatalf("in-flight request: %v", err)
	}
	if code := s.exitCode(); code != 0 {
		s.fatalf("exit %d", code)
	}
	next := serveExisting(t, s.config)
	next.waitMetric(roleActive, 1)
}

// TestExplicitLockPath: instance.lock names the lock; two configs naming
// one lock are one instance.
func TestExplicitLockPath(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "edge.lock")
	cfg := fmt.Sprintf("instance: {lock: %s}\n", lock) + appConfig(namedBackend(t, "one"), "")
	s := startServe(t, cfg)
	data, err := os.ReadFile(lock)
	if err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(s.cmd.Process.Pid) {
		s.fatalf("lock file %s holds %q (%v), want the PID %d", lock, data, err, s.cmd.Process.Pid)
	}
	other := filepath.Join(t.TempDir(), "other.yaml")
	writeConfig(t, other, cfg)
	if code, _, stderr := runLevee(t, "serve", "--config", other); code != 1 || !strings.Contains(stderr, lock) {
		t.Fatalf("another config on the same lock exited %d:\n%s", code, stderr)
	}
}

// TestSystemdNotify: under Type=notify levee says READY=1 once serving,
// RELOADING=1 (with MONOTONIC_USEC) then READY=1 around a reload, and
// STOPPING=1 when it drains.
func TestSystemdNotify(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	recv := func(p *proc) string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(waitTimeout))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			p.fatalf("no sd_notify message: %v", err)
		}
		return string(buf[:n])
	}
	path := filepath.Join(t.TempDir(), "levee.yaml")
	writeConfig(t, path, appConfig(namedBackend(t, "one"), ""))
	s := serveExisting(t, path, "NOTIFY_SOCKET="+sock)
	if got := recv(s.proc); !strings.HasPrefix(got, "READY=1\n") {
		s.fatalf("first message %q, want READY=1", got)
	}
	s.signal(syscall.SIGHUP)
	if got := recv(s.proc); !regexp.MustCompile(`^RELOADING=1\nMONOTONIC_USEC=[1-9][0-9]*$`).MatchString(got) {
		s.fatalf("on SIGHUP: %q, want RELOADING=1 and MONOTONIC_USEC", got)
	}
	if got := recv(s.proc); !strings.HasPrefix(got, "READY=1\n") {
		s.fatalf("after the reload: %q, want READY=1", got)
	}
	s.signal(syscall.SIGTERM)
	if got := recv(s.proc); !strings.HasPrefix(got, "STOPPING=1") {
		s.fatalf("on SIGTERM: %q, want STOPPING=1", got)
	}
	if code := s.exitCode(); code != 0 {
		s.fatalf("exit %d", code)
	}
}
