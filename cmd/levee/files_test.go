package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// hostile is a path a config must not be read from, and the reason a
// reload gives for refusing it.
type hostile struct {
	name, path, reason string
}

// hostilePaths makes a FIFO, a directory and a sparse file one byte over
// max in a new directory dir; /dev/zero is the fourth.
func hostilePaths(t *testing.T, dir string, max int64) []hostile {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, max+1); err != nil { // sparse: nothing is written
		t.Fatal(err)
	}
	return []hostile{
		{"fifo", fifo, "not a regular file (a FIFO)"},
		{"dev/zero", "/dev/zero", "not a regular file (a device)"},
		{"directory", sub, "not a regular file (a directory)"},
		{"oversized", big, "larger than "},
	}
}

// refusedFor matches the log line of a reload refused because of what is at path.
func refusedFor(trigger, field, path, reason string) *regexp.Regexp {
	return regexp.MustCompile(`msg="reload refused; the previous config keeps serving" trigger=` + trigger +
		` err="config: ` + regexp.QuoteMeta(field+"read "+path+": "+reason))
}

// A reload that cannot read a file it names is refused with the reason
// logged, and the old config serves on; a later good reload works, and
// SIGTERM then ends levee within its drain bound and releases the instance
// lock. Each of a FIFO, /dev/zero, a directory and an oversized file is
// tried as a TLS certificate the new config names (the incident: a
// certificate at /dev/zero read until OOM) and as the config file itself.
func TestReloadRefusesUnreadableFiles(t *testing.T) {
	x, y := namedBackend(t, "X"), namedBackend(t, "Y")
	dir := t.TempDir()
	lock := filepath.Join(dir, "levee.lock")
	head := fmt.Sprintf("instance: {lock: %s}\nserver: {drain_timeout: 2s}\n", lock)
	s := startServe(t, head+appConfig(x, ""))
	s.assertBackend("X")

	triggers := []string{"SIGHUP", "api"}
	reload := func(i int) string {
		trigger := triggers[i%2]
		if trigger == "SIGHUP" {
			s.signal(syscall.SIGHUP)
		} else if code, body, err := s.adminDo(http.MethodPost, "/reload"); err != nil || code != http.StatusBadRequest {
			s.fatalf("POST /reload = %d %q %v, want 400", code, body, err)
		}
		return trigger
	}
	n := 0
	for _, h := range hostilePaths(t, filepath.Join(dir, "pem"), config.MaxPEMBytes) {
		tlsListen := fmt.Sprintf("listen: [{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]\n", h.path, h.path)
		writeConfig(t, s.config, head+strings.Replace(appConfig(y, ""), listenLine(), tlsListen, 1))
		trigger := reload(n)
		s.waitOutput(s.stderr, refusedFor(trigger, "listen[0].tls.cert: ", h.path, h.reason))
		s.assertBackend("X")
		n++
	}
	for _, h := range hostilePaths(t, filepath.Join(dir, "cfg"), config.MaxConfigBytes) {
		if err := os.Remove(s.config); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(h.path, s.config); err != nil { // the config path now names it
			t.Fatal(err)
		}
		trigger := reload(n)
		s.waitOutput(s.stderr, refusedFor(trigger, "", s.config, h.reason))
		s.assertBackend("X")
		n++
	}
	if ok, failed := s.reloads(); ok != 0 || failed != float64(n) {
		s.fatalf("levee_config_reloads_total ok=%v error=%v, want 0 and %d", ok, failed, n)
	}

	if err := os.Remove(s.config); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, s.config, head+appConfig(y, ""))
	s.signal(syscall.SIGHUP)
	s.wantBackend("Y")

	start := time.Now()
	s.signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 0 {
		s.fatalf("levee exited %d after SIGTERM, want 0", code)
	}
	if d := time.Since(start); d > 2*time.Second+time.Second {
		s.fatalf("SIGTERM took %v with nothing in flight; the drain bound is 2s", d)
	}
	next := serveExisting(t, s.config) // takes the lock the first one released
	next.assertBackend("Y")
	next.signal(syscall.SIGTERM)
	if code := next.exitCode(); code != 0 {
		next.fatalf("the second levee exited %d, want 0", code)
	}
}

// SIGTERM ends levee while reloads are stuck reading: one from SIGHUP, in
// the signal loop that serve joins, and one from the API, which holds the
// reload lock the other waits for. serve passes its context to every load
// (config.Files.Load returns when it ends, whatever the filesystem does), so
// both are refused and serve returns. In-process, with a source that blocks
// until its context ends, as a read of a stalled filesystem would but for
// the context.
func TestSIGTERMEndsStalledReloads(t *testing.T) {
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nserver: {drain_timeout: 1s}\n" +
		"apps:\n  a: {hosts: [a.test], backends: [" + namedBackend(t, "X") + "]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// SIGHUP goes to this test process; keep it from ending the process if
	// serve has not yet, or no longer, asked for it.
	sink := make(chan os.Signal, 1)
	signal.Notify(sink, syscall.SIGHUP)
	defer signal.Stop(sink)

	var loads atomic.Int32
	stalled := make(chan struct{}, 2)
	src := source{load: func(ctx context.Context) (*config.Config, error) {
		if loads.Add(1) == 1 {
			return cfg, nil
		}
		stalled <- struct{}{}
		<-ctx.Done()
		return nil, fmt.Errorf("config: read levee.yaml: %w", ctx.Err())
	}}
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	admin := make(chan net.Addr, 1)
	stderr := newLogBuffer()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, src, io.Discard, stderr, func(_ []net.Addr, a net.Addr) { admin <- a })
	}()
	var adminAddr net.Addr
	select {
	case adminAddr = <-admin:
	case err := <-done:
		t.Fatalf("serve returned %v before serving", err)
	case <-time.After(waitTimeout):
		t.Fatal("serve did not start")
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStalled := func(what string) {
		select {
		case <-stalled:
		case <-time.After(waitTimeout):
			t.Fatalf("the %s reload never reached its load", what)
		}
	}
	waitStalled("SIGHUP")
	apiDone := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+adminAddr.String()+"/reload", "", nil)
		if err != nil {
			apiDone <- 0
			return
		}
		resp.Body.Close()
		apiDone <- resp.StatusCode
	}()

	start := time.Now()
	sigterm()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve = %v; want a clean stop", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("serve did not return within %v of SIGTERM with reloads stuck reading\n%s", waitTimeout, stderr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("serve took %v to stop; want about the 1s drain bound at most", d)
	}
	if code := <-apiDone; code != 0 && code != http.StatusBadRequest {
		t.Errorf("POST /reload during shutdown = %d; want 400 (refused) or no answer", code)
	}
	if !strings.Contains(stderr.String(), `trigger=SIGHUP err="config: read levee.yaml: context canceled"`) {
		t.Errorf("the stalled SIGHUP reload was not refused with its reason:\n%s", stderr)
	}
}
