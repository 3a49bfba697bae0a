package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/demo"
	"github.com/leveeproxy/levee/internal/drill"
)

// drillTimeout bounds a whole drill run; a passing run takes a few seconds.
const drillTimeout = 60 * time.Second

// runDrill runs `levee drill ARGS --json` to completion and decodes the card.
func runDrill(t *testing.T, args ...string) (code int, card drillCard, stderr string) {
	t.Helper()
	code, stdout, stderr := runLeveeWithin(t, drillTimeout, append(append([]string{"drill"}, args...), "--json")...)
	if code != exitUsage {
		if err := json.Unmarshal([]byte(stdout), &card); err != nil {
			t.Fatalf("levee drill %v: stdout is not a JSON card: %v\n%s\nstderr:\n%s", args, err, stdout, stderr)
		}
	}
	return code, card, stderr
}

type drillCard struct {
	Verdict string `json:"verdict"`
	Drills  []struct {
		Drill   string `json:"drill"`
		Verdict string `json:"verdict"`
		Reason  string `json:"reason"`
		Checks  []struct {
			Name string `json:"name"`
			Pass bool   `json:"pass"`
			Got  string `json:"got"`
		} `json:"checks"`
	} `json:"drills"`
}

func (c drillCard) verdicts() map[string]string {
	m := map[string]string{}
	for _, d := range c.Drills {
		m[d.Drill] = d.Verdict
	}
	return m
}

func (c drillCard) check(drill, name string) (pass, found bool) {
	for _, d := range c.Drills {
		for _, ch := range d.Checks {
			if d.Drill == drill && ch.Name == name {
				return ch.Pass, true
			}
		}
	}
	return false, false
}

// The drills load levee for seconds; the fasthttp re-run adds nothing the
// nethttp run and internal/drill's tests do not cover.
func skipDrillOnEngineRerun(t *testing.T) {
	if testH2C() {
		t.Skip("drill tests run once, over HTTP/1.1")
	}
}

func TestDrillUsage(t *testing.T) {
	for _, args := range [][]string{
		{"drill"},
		{"drill", "--host", "a"},
		{"drill", "nope"},
		{"drill", "tenant-limit"}, // missing flags
		{"drill", "tenant-limit", "--host", "a", "--limit", "fast"},         // bad rate
		{"drill", "tenant-limit", "--host", "a", "--limit", "5/s", "extra"}, // stray argument
		{"drill", "batch-storm", "--host", "a", "--duration", "-1s"},
		{"drill", "overload"}, // missing --overload-host
		{"drill", "overload", "--overload-host", "a", "--slots", "0"},
		{"drill", "overload", "--overload-host", "a", "--overload-offered", "fast"},
		{"drill", "overload", "--overload-host", "a", "--overload-offered", "0.5x"},
		{"drill", "overload", "--overload-host", "a", "--overload-base", "2x"},
		{"drill", "overload", "--overload-host", "a", "--min-goodput", "1.5"},
		{"drill", "overload", "--overload-host", "a", "--slots", "100000", "--service-time", "1ms"}, // 300M/s
		{"drill", "slow-clients"}, // missing --slow-host
		{"drill", "slow-clients", "--slow-host", "a", "--slow-kinds", "slowloris,fast"},
		{"drill", "slow-clients", "--slow-host", "a", "--slow-body-size", "4KiB,0"},
		{"drill", "slow-clients", "--slow-host", "a", "--slow-read-size", "1GiB"},
		{"drill", "slow-clients", "--slow-host", "a", "--slow-conns", "0"},
		{"drill", "slow-clients", "--slow-host", "a", "--min-success", "2"},
		{"drill", "grpc"}, // missing --grpc-authority
		{"drill", "grpc", "--grpc-authority", "a", "--grpc-calls", "0"},
		{"drill", "grpc", "--grpc-authority", "a", "--grpc-hold", "-1"},
		{"drill", "grpc", "--grpc-authority", "a", "--grpc-method", "Check"},
		{"drill", "upgrade", "--host", "a"},                                           // missing --command
		{"drill", "upgrade", "--host", "a", "--command", "true", "--limit-host", "b"}, // --limit-host without --limit
		{"drill", "upgrade", "--host", "a", "--command", "true", "--runs", "0"},
		{"drill", "upgrade", "--host", "a", "--command", "true", "--limit-offered", "1x"},
		{"drill", "upgrade", "--host", "a", "--command", "true", "--burst-tolerance", "0"},
		{"drill", "upgrade", "--host", "a", "--command", "true", "--settle", "0s"},
		{"drill", "all"}, // nothing applies
	} {
		if code, _, stderr := runLevee(t, args...); code != exitUsage || stderr == "" {
			t.Errorf("levee %v = %d, stderr %q; want %d and a message", args, code, stderr, exitUsage)
		}
	}
	if code, stdout, _ := runLevee(t, "drill", "--help"); code != 0 || !strings.Contains(stdout, "tenant-limit") {
		t.Errorf("levee drill --help = %d %q", code, stdout)
	}
}

// Every drill that can run against `levee demo` passes: the demo's config is
// the one the docs tell users to try.
func TestDrillAllPassesAgainstDemo(t *testing.T) {
	skipDrillOnEngineRerun(t)
	p := startLevee(t, "demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	proxy := p.waitOutput(p.stdout, demoURLs)[1]
	demoConfig := p.waitOutput(p.stdout, regexp.MustCompile(`(?m)^  config (\S+)`))[1]
	report := filepath.Join(t.TempDir(), "card.md")
	// Light load: levee and this generator are race-built and share two cores.
	code, card, stderr := runDrill(t, "all", "--target", "http://"+proxy, "--duration", "1s",
		"--host", "tenant.localhost", "--limit", "100/s", "--offered", "3x", "--tolerance", "0.3",
		"--other-host", "photos.localhost", "--other-rate", "20/s", "--normal-rate", "50/s", "--batch-rate", "2/s",
		"--hot-host", "photos.localhost", "--cold-domain", "photos.localhost", "--cold-hosts", "100", "--cold-rate", "200/s",
		"--timeout", "15s", "--p99-slack", "10s", "--refuse-within", "10s", "--cold-bound", "10s", "--report", report,
		"--config", demoConfig, "--dist-host", "drill.localhost", "--backend-port", strconv.Itoa(demo.DrillBackendPort),
		"--dist-rate", "200/s")
	// The demo has no app in front of a fixed-capacity backend, so overload
	// (TestOverloadDrillPassesAgainstLevee) is skipped: it needs --overload-host;
	// slow-clients starts its own backend too, and needs --slow-host; the
	// demo serves no gRPC (TestGRPCDrillPassesLevee in internal/drill);
	// upgrade needs --command.
	want := map[string]string{"grpc": "skipped", "tenant-limit": "pass", "batch-storm": "pass", "cold-catalog": "pass",
		"distribution": "pass", "duplicate-instance": "pass", "slow-clients": "skipped", "upgrade": "skipped", "overload": "skipped"}
	if got := card.verdicts(); code != 0 || card.Verdict != "pass" || len(got) != len(want) {
		t.Fatalf("exit %d, card %s %v; want 0, pass %v\n%+v\nstderr:\n%s", code, card.Verdict, got, want, card.Drills, stderr)
	}
	for d, v := range want {
		if got := card.verdicts()[d]; got != v {
			t.Errorf("%s: %s; want %s", d, got, v)
		}
	}
	md, err := os.ReadFile(report)
	if err != nil || !bytes.HasPrefix(md, []byte("# levee drill report card")) || !bytes.Contains(md, []byte("| tenant-limit | PASS |")) {
		t.Fatalf("report card %v:\n%s", err, md)
	}
}

// An edge without limits fails, with exit code 1.
func TestDrillFailsAPlainProxy(t *testing.T) {
	skipDrillOnEngineRerun(t)
	u, _ := url.Parse("http://" + namedBackend(t, "b"))
	edge := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(edge.Close)
	args := []string{"tenant-limit", "--target", edge.URL, "--duration", "500ms",
		"--host", "a.test", "--limit", "50/s", "--offered", "4x", "--other-host", "b.test"}
	code, card, stderr := runDrill(t, args...)
	if pass, found := card.check("tenant-limit", "admitted rate"); code != 1 || card.Verdict != "fail" || !found || pass {
		t.Fatalf("exit %d, card %+v; want 1, fail on the admitted rate\nstderr:\n%s", code, card, stderr)
	}
	// the table, on a pipe: no progress line (it is for terminals only)
	code, stdout, stderr := runLeveeWithin(t, drillTimeout, append([]string{"drill"}, args...)...)
	if code != 1 || strings.Contains(stdout, "\r") || !strings.Contains(stdout, "admitted rate") ||
		!strings.Contains(stdout, edge.URL+": FAIL") {
		t.Fatalf("table: exit %d\n%q\nstderr:\n%s", code, stdout, stderr)
	}
}

// freePort is a loopback port nothing listens on now, for a backend the
// edge's config must name before the drill starts it.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// levee serve with the protection the overload drill prints passes it: a
// backend of 8 slots x 80 ms (100/s) offered 300/s. The bounds are loose
// (race-built levee and generator share two cores); the drill's own tests
// show each check failing against a bad edge.
func TestOverloadDrillPassesAgainstLevee(t *testing.T) {
	skipDrillOnEngineRerun(t)
	port := freePort(t)
	s := startServe(t, appConfig(fmt.Sprintf("127.0.0.1:%d", port),
		"    limits: {concurrency: 8, queue: {max_wait: 10ms, max_len: 16}}\n"))
	code, card, stderr := runDrill(t, "overload", "--target", s.proxy, "--overload-host", "a.test",
		"--overload-port", strconv.Itoa(port), "--slots", "8", "--service-time", "80ms", "--duration", "1s",
		"--timeout", "15s", "--p99-slack", "10s", "--refuse-within", "10s", "--min-goodput", "0.4", "--max-inflight", "512")
	if code != 0 || card.Verdict != "pass" {
		t.Fatalf("exit %d, card %+v; want 0, pass\nstderr:\n%s", code, card, stderr)
	}
	if !strings.Contains(stderr, "concurrency: 8, queue: {max_wait: 10ms, max_len: 16}") {
		t.Fatalf("stderr does not show the levee config for the backend:\n%s", stderr)
	}
}

// The slow-clients drill runs from the command line against levee serve
// with its own backend on the port the config names: 20 connections of each
// kind stay far below an app's default 256 slots, so the victim is served.
// internal/drill's TestSlowClientsDrill fails an edge whose slots they take.
func TestSlowClientsDrillRunsAgainstLevee(t *testing.T) {
	skipDrillOnEngineRerun(t)
	port := freePort(t)
	s := startServe(t, appConfig(fmt.Sprintf("127.0.0.1:%d", port), ""))
	code, card, stderr := runDrill(t, "slow-clients", "--target", s.proxy, "--slow-host", "a.test",
		"--slow-port", strconv.Itoa(port), "--slow-conns", "20", "--slow-interval", "50ms", "--slow-body-size", "4KiB,128KiB",
		"--slow-read-size", "256KiB", "--victim-rate", "40/s", "--duration", "1s", "--timeout", "15s", "--p99-slack", "10s")
	if code != 0 || card.Verdict != "pass" {
		t.Fatalf("exit %d, card %+v; want 0, pass\nstderr:\n%s", code, card, stderr)
	}
	if pass, found := card.check("slow-clients", "victim's success under attack"); !found || !pass {
		t.Fatalf("card %+v", card)
	}
}

// hasInstanceLock: issue 6's instance lock is configured under `instance:`;
// a levee without it rejects the key.
func hasInstanceLock(t *testing.T) bool {
	path := filepath.Join(t.TempDir(), "probe.yaml")
	writeConfig(t, path, "instance: {unexpected: refuse}\n")
	code, _, _ := runLevee(t, "check", "--config", path)
	return code == 0
}

const missingLock = "duplicate-instance needs the instance lock of issue 6 (`instance:` config, " +
	"levee_instance_role metric), which this levee does not have: `levee check` rejects `instance:`"

// otherTmpLevee is a levee started with its own $TMPDIR, as under systemd's
// PrivateTmp: a lock file derived into the temporary directory is then
// another file, and nothing stops the second instance.
func otherTmpLevee(t *testing.T) string {
	if _, err := os.Stat("/run/levee"); err == nil {
		t.Skip("/run/levee exists: derived lock files go there, whatever $TMPDIR says")
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "levee-other-tmp")
	script := "#!/bin/sh\nTMPDIR=" + dir + " exec " + leveeBin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// A second levee that does not see the first one's lock (or a levee with
// no lock at all) serves with the full limit: the drill must catch the
// doubled limit.
func TestDuplicateInstanceDrillCatchesADoubledLimit(t *testing.T) {
	skipDrillOnEngineRerun(t)
	s := startServe(t, appConfig(namedBackend(t, "b"), "    limits: {rate: 50/s}\n"))
	code, card, stderr := runDrill(t, "duplicate-instance", "--config", s.config, "--target", s.proxy,
		"--host", "a.test", "--limit", "50/s", "--offered", "6x", "--duration", "1s", "--levee", otherTmpLevee(t))
	pass, found := card.check("duplicate-instance", "shared limit does not double")
	if code != 1 || !found || pass {
		t.Fatalf("exit %d, card %+v; want 1 and the doubled limit caught\nstderr:\n%s", code, card, stderr)
	}
}

// With the lock, the second instance refuses (the default) or serves with
// strict limits, and the drill passes.
func TestDuplicateInstanceDrillPasses(t *testing.T) {
	skipDrillOnEngineRerun(t)
	if !hasInstanceLock(t) {
		t.Skip(missingLock)
	}
	be := namedBackend(t, "b")
	for _, c := range []struct{ mode, check string }{
		{"refuse", "second instance refuses to start"},
		{"strict", "shared limit does not double"},
	} {
		lock := filepath.Join(t.TempDir(), "levee.lock")
		s := startServe(t, appConfig(be, "    limits: {rate: 50/s}\n")+
			"instance: {unexpected: "+c.mode+", lock: "+lock+"}\n")
		// strict: 50/s + 10% beside it, and a burst each, within 25% over 2 s
		code, card, stderr := runDrill(t, "duplicate-instance", "--config", s.config, "--target", s.proxy,
			"--host", "a.test", "--limit", "50/s", "--offered", "6x", "--duration", "2s", "--tolerance", "0.25")
		if pass, found := card.check("duplicate-instance", c.check); code != 0 || card.Verdict != "pass" || !found || !pass {
			t.Fatalf("%s: exit %d, card %+v; want 0, pass on %q\nstderr:\n%s", c.mode, code, card, c.check, stderr)
		}
		s.signal(syscall.SIGTERM)
		s.exitCode()
	}
}

func TestOfferedFlag(t *testing.T) {
	var o drill.Options
	f := offeredFlag{&o}
	if err := f.Set("4x"); err != nil || o.Offered != 4 || o.OfferedSteps != nil {
		t.Fatalf("4x: %v %+v", err, o)
	}
	o = drill.Options{}
	if err := f.Set("2x:2s, 10x:3s"); err != nil || o.Offered != 10 ||
		len(o.OfferedSteps) != 2 || o.OfferedSteps[0] != (drill.Step{Rate: 2, For: 2 * time.Second}) || o.OfferedSteps[1] != (drill.Step{Rate: 10, For: 3 * time.Second}) {
		t.Fatalf("steps: %v %+v", err, o)
	}
	for _, bad := range []string{"0.5x", "fast", "2x,10x:3s", "2x:soon", "2x:-1s", "5000x"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("--offered %s: want an error", bad)
		}
	}
}
