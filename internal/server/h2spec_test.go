package server

// TestH2Spec runs the h2spec conformance suite (github.com/summerwind/h2spec)
// against a levee TLS listener and an h2c listener, as a regression gate:
// a new failure, or fewer passes than today, fails the build. None is
// allowed: levee's HTTP/2 server (package h2) passes all 145.

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireH2specEnv set to 1 turns a missing h2spec binary into a failure (CI).
const requireH2specEnv = "LEVEE_REQUIRE_H2SPEC"

const (
	// h2specCaseTimeout is h2spec's -o: how long it waits for each frame
	// it expects. It bounds nothing levee must meet: the server closes a
	// connection 1s after a GOAWAY for an error (its linger), so a shorter
	// wait fails cases that pass.
	h2specCaseTimeout = 3 * time.Second
	// h2specRunTimeout bounds one whole run (about 15s today), so that a
	// stuck levee or h2spec fails the test instead of hanging CI.
	h2specRunTimeout = 3 * time.Minute
)

// h2specBaseline is what one listener is known to pass: at least minPassed
// cases, and no failure outside allowed (h2spec id → the case's
// description, checked too, so that a renumbering in another h2spec version
// cannot quietly allow a different case).
type h2specBaseline struct {
	minPassed int
	allowed   map[string]string
}

// h2specBaselines are the known figures for h2spec v2.2.1, per listener:
// every case passes, on both (docs/http.md, "HTTP/2 conformance").
var h2specBaselines = map[string]h2specBaseline{
	"tls": {minPassed: 145},
	"h2c": {minPassed: 145},
}

// withCase returns a copy of m with one more case.
func withCase(m map[string]string, id, desc string) map[string]string {
	out := maps.Clone(m)
	out[id] = desc
	return out
}

func TestH2Spec(t *testing.T) {
	if testH2C() {
		t.Skip("its listeners are explicit: it runs once, in the http1 run")
	}
	bin := lookH2spec(t)
	// h2spec needs a response body of at least one byte for its flow
	// control cases (it skips them otherwise), so the backend sends one.
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "h2spec backend\n")
	})
	certFile, keyFile, _ := selfSigned(t)
	// h2spec sends :authority 127.0.0.1:PORT.
	p := startProxy(t, fmt.Sprintf("listen:\n"+
		"  - {addr: 127.0.0.1:0, tls: {cert: %q, key: %q}}\n"+
		"  - {addr: 127.0.0.1:0, h2c: true}\n"+
		"apps:\n  h2spec:\n    hosts: [127.0.0.1]\n    backends: [%s]\n",
		certFile, keyFile, backend))
	addrs := p.srv.Addrs()
	for i, name := range []string{"tls", "h2c"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cases := runH2spec(t, bin, addrs[i], name == "tls")
			v := judgeH2spec(cases, h2specBaselines[name])
			t.Logf("h2spec %s: %d of %d cases passed", name, v.passed, len(cases))
			if len(v.fixed) > 0 {
				t.Logf("h2spec %s: allowed failures now pass, tighten the baseline: %v", name, v.fixed)
			}
			for _, p := range v.problems {
				t.Error(p)
			}
		})
	}
}

// lookH2spec finds h2spec on PATH or in $(go env GOPATH)/bin, or skips t
// (fails it with LEVEE_REQUIRE_H2SPEC=1).
func lookH2spec(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("h2spec")
	if err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, goErr := exec.CommandContext(ctx, "go", "env", "GOPATH").Output(); goErr == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if bin, err = exec.LookPath(filepath.Join(dir, "bin", "h2spec")); err == nil {
				return bin
			}
		}
	}
	const install = "go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
	if os.Getenv(requireH2specEnv) == "1" {
		t.Fatalf("h2spec not found on PATH or in $(go env GOPATH)/bin and %s=1 (%s)", requireH2specEnv, install)
	}
	t.Skipf("h2spec not installed (%s); set %s=1 to fail instead", install, requireH2specEnv)
	return ""
}

// runH2spec runs every (non-strict) h2spec case against addr and returns
// the results from its JUnit report.
func runH2spec(t *testing.T, bin string, addr net.Addr, useTLS bool) []h2specCase {
	t.Helper()
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	args := []string{"-h", host, "-p", port, "-o", strconv.Itoa(int(h2specCaseTimeout / time.Second)), "-j", report}
	if useTLS {
		args = append(args, "-t", "-k") // -k: the certificate is self-signed
	}
	ctx, cancel := context.WithTimeout(context.Background(), h2specRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Once killed, do not wait on whatever else holds its output open.
	cmd.WaitDelay = 5 * time.Second
	// h2spec exits 1 when any case fails, which the report says better.
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("h2spec %v: did not finish within %v\n%s", args, h2specRunTimeout, tail(out.String(), 40))
	}
	f, err := os.Open(report)
	if err != nil {
		// It writes no report when it gives up mid-run (a failed dial).
		t.Fatalf("h2spec %v: %v; no report: %v\n%s", args, runErr, err, tail(out.String(), 40))
	}
	defer f.Close()
	cases, err := parseH2specReport(f)
	if err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		t.Fatalf("h2spec %v: %v", args, runErr)
	}
	return cases
}

// h2specCase is one case's result.
type h2specCase struct {
	ID      string // "http2/4.2/3": group, then the case's place in it from 1
	Desc    string
	Failed  bool
	Skipped bool
	Detail  string // what was expected and what came, when it failed
}

// parseH2specReport reads an h2spec JUnit report. h2spec names a case by its
// group and its place in the group; the report lists a group's cases in
// that order, and all of them when the run is not limited to some sections.
// It reports a case's mismatch as a failure or as an error, by a quirk of
// its type switch, so both count as failed.
func parseH2specReport(r io.Reader) ([]h2specCase, error) {
	type text struct {
		Text string `xml:",chardata"`
	}
	var report struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Desc    string `xml:"classname,attr"`
				Failure *text  `xml:"failure"`
				Error   *text  `xml:"error"`
				Skipped *text  `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.NewDecoder(r).Decode(&report); err != nil {
		return nil, fmt.Errorf("h2spec report: %w", err)
	}
	var cases []h2specCase
	for _, s := range report.Suites {
		for i, c := range s.Cases {
			hc := h2specCase{ID: s.Package + "/" + strconv.Itoa(i+1), Desc: c.Desc, Skipped: c.Skipped != nil}
			for _, bad := range []*text{c.Failure, c.Error} {
				if bad != nil {
					hc.Failed, hc.Detail = true, strings.TrimSpace(bad.Text)
				}
			}
			cases = append(cases, hc)
		}
	}
	if len(cases) == 0 {
		return nil, errors.New("h2spec report: no test cases")
	}
	return cases, nil
}

// h2specVerdict is a run judged against its baseline.
type h2specVerdict struct {
	passed   int
	problems []string // each fails the test
	fixed    []string // allowed failures that passed: the baseline can tighten
}

// judgeH2spec counts the cases passed and lists what breaks the baseline: a
// failure not allowed, or fewer passes than known.
func judgeH2spec(cases []h2specCase, b h2specBaseline) h2specVerdict {
	var v h2specVerdict
	for _, c := range cases {
		switch {
		case c.Failed:
			if desc, ok := b.allowed[c.ID]; !ok || desc != c.Desc {
				v.problems = append(v.problems, fmt.Sprintf("%s %q failed, and is not an allowed failure:\n%s", c.ID, c.Desc, c.Detail))
			}
		case c.Skipped:
		default:
			v.passed++
			if _, ok := b.allowed[c.ID]; ok {
				v.fixed = append(v.fixed, c.ID)
			}
		}
	}
	if v.passed < b.minPassed {
		v.problems = append(v.problems, fmt.Sprintf("%d cases passed, fewer than the %d known to pass", v.passed, b.minPassed))
	}
	return v
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestJudgeH2spec checks the gate itself on a report of h2spec's shape,
// without h2spec.
func TestJudgeH2spec(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="4.2. Frame Size" package="http2/4.2" id="4.2" tests="3" skipped="0" failures="0" errors="1">
    <testcase package="http2/4.2" classname="Sends a DATA frame with 2^14 octets in length" time="0.0010"></testcase>
    <testcase package="http2/4.2" classname="Sends a large size DATA frame that exceeds the SETTINGS_MAX_FRAME_SIZE" time="0.0071"></testcase>
    <testcase package="http2/4.2" classname="Sends a large size HEADERS frame that exceeds the SETTINGS_MAX_FRAME_SIZE" time="2.0017">
      <error>GOAWAY Frame (Error Code: FRAME_SIZE_ERROR)&#xA;DATA Frame (length:23, flags:0x01, stream_id:1)</error>
    </testcase>
  </testsuite>
  <testsuite name="6.5.3. Settings Synchronization" package="http2/6.5.3" id="6.5.3" tests="2" skipped="1" failures="1" errors="0">
    <testcase package="http2/6.5.3" classname="Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE" time="0.0001"><skipped></skipped></testcase>
    <testcase package="http2/6.5.3" classname="Sends a SETTINGS frame without ACK flag" time="0.0003"><failure>SETTINGS Frame&#xA;Connection closed</failure></testcase>
  </testsuite>
</testsuites>`
	cases, err := parseH2specReport(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cases {
		ids = append(ids, fmt.Sprintf("%s failed=%v skipped=%v", c.ID, c.Failed, c.Skipped))
	}
	want := []string{
		"http2/4.2/1 failed=false skipped=false",
		"http2/4.2/2 failed=false skipped=false",
		"http2/4.2/3 failed=true skipped=false",
		"http2/6.5.3/1 failed=false skipped=true",
		"http2/6.5.3/2 failed=true skipped=false",
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("parsed\n%s\nwant\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(cases[2].Detail, "GOAWAY Frame") {
		t.Errorf("detail %q, want the report's text", cases[2].Detail)
	}

	allowed := map[string]string{
		"http2/4.2/3":   "Sends a large size HEADERS frame that exceeds the SETTINGS_MAX_FRAME_SIZE",
		"http2/6.5.3/1": "Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE",
	}
	for _, tc := range []struct {
		name     string
		b        h2specBaseline
		problems []string // a substring of each problem, in order
	}{
		{"a failure not allowed", h2specBaseline{2, allowed}, []string{"http2/6.5.3/2"}},
		{"both failures allowed", h2specBaseline{2, withCase(allowed, "http2/6.5.3/2", "Sends a SETTINGS frame without ACK flag")}, nil},
		{"an allowed id with another description", h2specBaseline{2, withCase(allowed, "http2/6.5.3/2", "Sends a PING frame")}, []string{"http2/6.5.3/2"}},
		// The skipped case passed nothing: 2 passes, not 3.
		{"fewer passes than known", h2specBaseline{3, withCase(allowed, "http2/6.5.3/2", "Sends a SETTINGS frame without ACK flag")}, []string{"2 cases passed, fewer than the 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeH2spec(cases, tc.b)
			if v.passed != 2 {
				t.Errorf("passed %d, want 2", v.passed)
			}
			if len(v.problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d matching %q", v.problems, len(tc.problems), tc.problems)
			}
			for i, p := range v.problems {
				if !strings.Contains(p, tc.problems[i]) {
					t.Errorf("problem %q, want one about %q", p, tc.problems[i])
				}
			}
		})
	}

	v := judgeH2spec(cases, h2specBaseline{0, withCase(allowed, "http2/4.2/1", "Sends a DATA frame with 2^14 octets in length")})
	if !slices.Equal(v.fixed, []string{"http2/4.2/1"}) {
		t.Errorf("fixed %v, want the allowed failure that passed", v.fixed)
	}
}
