package main

// These tests build the levee binary once and drive it as a subprocess, the
// way an operator (or a process supervisor) does: flags, exit codes, signals,
// the admin API and the proxy listener. Nothing here sleeps to order events:
// every wait is for a condition (a log line, an HTTP answer, an exit), with a
// deadline that fails the test and shows what levee printed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitTimeout bounds every wait. It is a deadline for a failure report, not a
// threshold a passing run depends on.
const waitTimeout = 10 * time.Second

// leveeBin is the binary built by TestMain.
var leveeBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	if bin := os.Getenv(binEnv); bin != "" { // the fasthttp run started below
		leveeBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "levee-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	leveeBin = filepath.Join(dir, "levee")
	args := []string{"build", "-o", leveeBin}
	if raceEnabled { // a data race in the binary then fails the test that hit it
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build levee: %v\n%s", err, out)
		return 1
	}
	if raceEnabled && os.Getenv("GORACE") == "" {
		// A race binary sleeps 1s at a clean exit so late races can report;
		// each test waits for its process's exit, so that would only add time.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	pg.Close()
	if os.Getenv(protoEnv) != "" {
		return code // a run of one protocol (h2c, or fasthttp: see engineServer)
	}
	// Again over h2c on the proxy listener (serve, reload and drain tests).
	fmt.Fprintf(os.Stderr, "=== protocol h2c: %s=h2c %s\n", protoEnv, os.Args[0])
	cmd := exec.Command(os.Args[0], append(os.Args[1:len(os.Args):len(os.Args)], "-test.bench=^$")...)
	cmd.Env = append(os.Environ(), protoEnv+"=h2c", binEnv+"="+leveeBin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "--- FAIL: protocol h2c: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// logBuffer collects a process's output and wakes waiters on every write.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

// proc is one levee process started by a test; t.Cleanup kills it.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdout  *logBuffer
	stderr  *logBuffer
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
}

func startLevee(t *testing.T, args ...string) *proc {
	t.Helper()
	return startLeveeEnv(t, nil, args...)
}

// startLeveeEnv is startLevee with extra environment variables ("K=V").
func startLeveeEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: newLogBuffer(), stderr: newLogBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(leveeBin, args...)
	p.cmd.Env = append(testEnv(t), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.start()
	return p
}

// start starts p.cmd, made ready by the caller, and makes p.done close
// at its exit; t.Cleanup kills it if it still runs.
func (p *proc) start() {
	t, args := p.t, p.cmd.Args[1:]
	t.Helper()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start levee %v: %v", args, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill() // by PID: only the process this test started
			<-p.done
		}
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("levee %v reported a data race:\n%s", args, p.stderr)
		}
	})
}

func (p *proc) fatalf(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("%s\n--- levee stdout:\n%s\n--- levee stderr:\n%s", fmt.Sprintf(format, args...), p.stdout, p.stderr)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.fatalf("send %v: %v", sig, err)
	}
}

// exitCode waits for the process to exit and returns its exit code.
func (p *proc) exitCode() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		p.fatalf("levee did not exit within %v", waitTimeout)
	}
	var exit *exec.ExitError
	if errors.As(p.waitErr, &exit) {
		return exit.ExitCode()
	}
	if p.waitErr != nil {
		p.fatalf("wait: %v", p.waitErr)
	}
	return 0
}

// waitOutput waits until re matches the text in buf and returns the submatches.
func (p *proc) waitOutput(buf *logBuffer, re *regexp.Regexp) []string {
	p.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		text, changed := buf.snapshot()
		if m := re.FindStringSubmatch(text); m != nil {
			return m
		}
		select {
		case <-changed:
		case <-p.done:
			if m := re.FindStringSubmatch(buf.String()); m != nil {
				return m
			}
			p.fatalf("levee exited (%v) before printing %q", p.waitErr, re)
		case <-deadline.C:
			p.fatalf("levee did not print %q within %v", re, waitTimeout)
		}
	}
}

// waitCount waits until re matches at least n times in buf.
func (p *proc) waitCount(buf *logBuffer, re *regexp.Regexp, n int) {
	p.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		text, changed := buf.snapshot()
		if len(re.FindAllStringIndex(text, -1)) >= n {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			p.fatalf("levee exited (%v) before printing %q %d times", p.waitErr, re, n)
		case <-deadline.C:
			p.fatalf("levee did not print %q %d times within %v", re, n, waitTimeout)
		}
	}
}

// eventually polls cond until it holds, failing with its last report at the deadline.
func (p *proc) eventually(what string, cond func() (ok bool, last string)) {
	p.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			p.fatalf("%s: not within %v; last: %s", what, waitTimeout, last)
		}
		select {
		case <-p.done:
			p.fatalf("%s: levee exited (%v); last: %s", what, p.waitErr, last)
		case <-time.After(5 * time.Millisecond): // poll interval, not an ordering sleep
		}
	}
}

// runLevee runs a short levee command to completion.
func runLevee(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runLeveeWithin(t, waitTimeout, args...)
}

// runLeveeWithin is runLevee with its own deadline, for longer commands.
func runLeveeWithin(t *testing.T, within time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, leveeBin, args...)
	cmd.Env = testEnv(t)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("levee %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, &out, &errb)
	}
	return code, out.String(), errb.String()
}

// testEnv is the environment of every levee a test starts: its own, with
// TMPDIR inside the build directory, so that derived instance lock files
// (levee-*.lock, never deleted by levee) go away with it, and every levee
// of one test finds the same lock.
func testEnv(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(leveeBin), "tmp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "TMPDIR="+dir)
}

// servingLine is the log line levee prints once its listeners are bound.
var servingLine = regexp.MustCompile(`msg="levee serving" listen=\[([^\] ]+)\] admin=(\S+)`)

// serveProc is a running `levee serve` with the addresses it bound.
type serveProc struct {
	*proc
	config string // path of the config file
	proxy  string // http://host:port of the first listener
	admin  string // http://host:port of the admin listener
	client *http.Client
}

// startServe writes cfg to a file and runs `levee serve` on it.
func startServe(t *testing.T, cfg string) *serveProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "levee.yaml")
	writeConfig(t, path, cfg)
	p := startLevee(t, "serve", "--config", path)
	m := p.waitOutput(p.stderr, servingLine)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if testH2C() {
		h2 := &http.Transport{Protocols: new(http.Protocols)}
		h2.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(h2.CloseIdleConnections)
		rt = proxyOverH2C{proxy: m[1], h2c: h2, h1: tr}
	}
	return &serveProc{
		proc: p, config: path,
		proxy:  "http://" + m[1],
		admin:  "http://" + m[2],
		client: &http.Client{Transport: rt, Timeout: waitTimeout},
	}
}

// proxyOverH2C sends requests for the proxy's address over h2c and the
// rest (the admin listener, which speaks HTTP/1.1 only) over HTTP/1.1.
type proxyOverH2C struct {
	proxy   string // host:port
	h2c, h1 http.RoundTripper
}

func (p proxyOverH2C) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == p.proxy {
		return p.h2c.RoundTrip(r)
	}
	return p.h1.RoundTrip(r)
}

// writeConfig replaces the file at path atomically, so a reload never reads half a file.
func writeConfig(t *testing.T, path, cfg string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// get sends GET path to the proxy with the given Host header.
func (s *serveProc) get(host, path string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, s.proxy+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	return do(s.client, req)
}

// adminDo sends method path to the admin listener.
func (s *serveProc) adminDo(method, path string) (int, string, error) {
	req, err := http.NewRequest(method, s.admin+path, nil)
	if err != nil {
		return 0, "", err
	}
	return do(s.client, req)
}

func do(c *http.Client, req *http.Request) (int, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// namedBackend is an upstream in the test process that answers with its name.
func namedBackend(t *testing.T, name string) string {
	t.Helper()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b.Listener.Addr().String()
}

// appConfig is a config with one app, "a" on host a.test, in front of backend;
// extra is appended under the app (indented four spaces).
func appConfig(backend, extra string) string {
	return fmt.Sprintf(`%s
admin: 127.0.0.1:0
apps:
  a:
    hosts: [a.test]
    backends: [%s]
%s`, listenLine(), backend, extra)
}

// protoEnv, set to h2c, runs the tests with the proxy listener serving h2c
// and the test client speaking it; TestMain runs the tests once more so.
// binEnv hands the child run the binary already built.
const (
	protoEnv = "LEVEE_TEST_PROTO"
	binEnv   = "LEVEE_TEST_BIN"
)

func testH2C() bool { return os.Getenv(protoEnv) == "h2c" }

// listenLine is appConfig's listen key, for the protocol under test.
func listenLine() string {
	if testH2C() {
		return "listen: [{addr: 127.0.0.1:0, h2c: true}]"
	}
	return "listen: 127.0.0.1:0"
}
