package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeTemp(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "levee.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckValid(t *testing.T) {
	path := writeTemp(t, appConfig("127.0.0.1:9001", ""))
	code, stdout, stderr := runLevee(t, "check", "--config", path)
	if code != 0 {
		t.Fatalf("check exit = %d, want 0\nstderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, path+": ok (1 apps, 1 listeners)") {
		t.Errorf("check stdout = %q, want it to say ok", stdout)
	}
}

func TestCheckListsEveryProblem(t *testing.T) {
	path := writeTemp(t, `listen: 127.0.0.1:0
admin: 127.0.0.1:0
colour: blue
apps:
  photos:
    hosts: [photos.test]
    backends: [127.0.0.1:9001, "not-an-address"]
    limits:
      concurrency: 0
`)
	code, stdout, stderr := runLevee(t, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check exit = %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"3 problem(s)",
		"colour: unknown key",
		`apps.photos.backends[1]: "not-an-address" is not host:port`,
		"apps.photos.limits.concurrency: must be 1..",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("check stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stdout, "ok") {
		t.Errorf("check of a bad config printed %q on stdout", stdout)
	}
}

// levee check says why the admission limits cannot be shadowed.
func TestCheckRefusesShadowingTheQueue(t *testing.T) {
	path := writeTemp(t, `listen: 127.0.0.1:0
admin: 127.0.0.1:0
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:9001]
    limits: {shadow: [rate, queue-full]}
`)
	code, stdout, stderr := runLevee(t, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check exit = %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := `apps.a.limits.shadow: "queue-full" is never shadowed: the concurrency and queue limits protect levee itself`
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "1 problem(s)") {
		t.Errorf("check stderr lacks %q as its one problem:\n%s", want, stderr)
	}
}

func TestCheckMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	code, _, stderr := runLevee(t, "check", "--config", path)
	if code != 1 {
		t.Fatalf("check exit = %d, want 1\nstderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, path) {
		t.Errorf("check stderr does not name the file %s:\n%s", path, stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"no args", nil, "Usage:"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"check without --config", []string{"check"}, "want --config FILE"},
		{"serve without --config", []string{"serve"}, "want --config FILE"},
		{"check with extra args", []string{"check", "--config", "a.yaml", "b.yaml"}, "want --config FILE"},
		{"check unknown flag", []string{"check", "--nope"}, "flag provided but not defined"},
		{"demo extra args", []string{"demo", "extra"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runLevee(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("levee %q exit = %d, want %d\nstderr:\n%s", tc.args, code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("levee %q stderr lacks %q:\n%s", tc.args, tc.want, stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		code, stdout, stderr := runLevee(t, arg)
		if code != 0 || !strings.HasPrefix(stdout, "levee ") {
			t.Errorf("levee %s = %d %q, want 0 \"levee ...\"\nstderr:\n%s", arg, code, stdout, stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	code, stdout, _ := runLevee(t, "help")
	if code != 0 || !strings.Contains(stdout, "levee serve --config FILE") {
		t.Errorf("levee help = %d %q, want 0 and the usage", code, stdout)
	}
}

// TestCheckRefusesHostileFiles: a config file, cert or key that is not a
// regular file is refused, naming the field, and reading it cannot block.
func TestCheckRefusesHostileFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tlsConfig := writeTemp(t, "listen: [{addr: 127.0.0.1:0, tls: {cert: /dev/zero, key: /dev/zero}}]\n"+
		"admin: 127.0.0.1:0\napps:\n  a: {hosts: [a.test], backends: ['127.0.0.1:9001']}\n")
	for _, tc := range []struct{ name, config, want string }{
		{"config is a FIFO", fifo, "not a regular file (a FIFO)"},
		{"cert is /dev/zero", tlsConfig, "listen[0].tls.cert: read /dev/zero: not a regular file (a device)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runLevee(t, "check", "--config", tc.config) // runLevee has a deadline
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("check exit = %d, stderr:\n%s\nwant 1 and %q", code, stderr, tc.want)
			}
		})
	}
}
