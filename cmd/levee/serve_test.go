package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// brokenExtra is an unknown key under app "a": the config is refused whole.
const brokenExtra = "    bogus: 1\n"

// wantBackend polls until requests to app a are answered by backend name.
func (s *serveProc) wantBackend(name string) {
	s.t.Helper()
	s.eventually("app a answered by "+name, func() (bool, string) {
		code, body, err := s.get("a.test", "/")
		return err == nil && code == http.StatusOK && body == name, fmt.Sprintf("%d %q %v", code, body, err)
	})
}

// assertBackend checks that one request to app a is answered by backend name.
func (s *serveProc) assertBackend(name string) {
	s.t.Helper()
	code, body, err := s.get("a.test", "/")
	if err != nil || code != http.StatusOK || body != name {
		s.fatalf("GET a.test = %d %q %v, want 200 %q", code, body, err, name)
	}
}

var reloadsMetric = regexp.MustCompile(`(?m)^levee_config_reloads_total\{result="(ok|error)"\} (\S+)$`)

// reloads reads levee_config_reloads_total from /metrics.
func (s *serveProc) reloads() (ok, failed float64) {
	s.t.Helper()
	code, body, err := s.adminDo(http.MethodGet, "/metrics")
	if err != nil || code != http.StatusOK {
		s.fatalf("GET /metrics = %d %v", code, err)
	}
	for _, m := range reloadsMetric.FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			s.fatalf("metric %q: %v", m[0], err)
		}
		if m[1] == "ok" {
			ok = v
		} else {
			failed = v
		}
	}
	return ok, failed
}

var (
	reloadedLine = regexp.MustCompile(`msg="config reloaded"`)
	refusedLine  = regexp.MustCompile(`msg="reload refused; the previous config keeps serving" trigger=(\S+) err=".*apps\.a\.bogus: unknown key`)
)

func TestReloadOnSIGHUP(t *testing.T) {
	x, y := namedBackend(t, "X"), namedBackend(t, "Y")
	s := startServe(t, appConfig(x, ""))
	s.assertBackend("X")

	writeConfig(t, s.config, appConfig(y, ""))
	s.signal(syscall.SIGHUP)
	s.wantBackend("Y")
	s.waitCount(s.stderr, reloadedLine, 1)

	writeConfig(t, s.config, appConfig(x, brokenExtra))
	s.signal(syscall.SIGHUP)
	if m := s.waitOutput(s.stderr, refusedLine); m[1] != "SIGHUP" {
		s.fatalf("refused reload logged trigger=%s, want SIGHUP", m[1])
	}
	s.assertBackend("Y")
	if ok, failed := s.reloads(); ok != 1 || failed < 1 {
		s.fatalf("levee_config_reloads_total ok=%v error=%v, want 1 and >= 1", ok, failed)
	}
	if code, body, err := s.adminDo(http.MethodGet, "/readyz"); err != nil || code != http.StatusOK {
		s.fatalf("/readyz after a refused reload = %d %q %v, want 200", code, body, err)
	}
}

func TestReloadAPI(t *testing.T) {
	x, y := namedBackend(t, "X"), namedBackend(t, "Y")
	s := startServe(t, appConfig(x, ""))
	s.assertBackend("X")

	reload := func() (int, map[string]any) {
		t.Helper()
		code, body, err := s.adminDo(http.MethodPost, "/reload")
		if err != nil {
			s.fatalf("POST /reload: %v", err)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			s.fatalf("POST /reload = %d %q: not JSON: %v", code, body, err)
		}
		return code, v
	}

	writeConfig(t, s.config, appConfig(y, brokenExtra))
	code, v := reload()
	if code != http.StatusBadRequest || v["ok"] != false {
		s.fatalf("POST /reload of a broken config = %d %v, want 400 ok:false", code, v)
	}
	if msg, _ := v["error"].(string); !strings.Contains(msg, "apps.a.bogus: unknown key") {
		s.fatalf("POST /reload error = %q, want it to name apps.a.bogus", msg)
	}
	s.waitOutput(s.stderr, refusedLine)
	s.assertBackend("X")

	writeConfig(t, s.config, appConfig(y, ""))
	code, v = reload()
	if code != http.StatusOK || v["ok"] != true || len(v) != 1 {
		s.fatalf("POST /reload of a good config = %d %v, want 200 {\"ok\":true}", code, v)
	}
	s.assertBackend("Y") // the reload is in force when /reload answers

	if ok, failed := s.reloads(); ok != 1 || failed != 1 {
		s.fatalf("levee_config_reloads_total ok=%v error=%v, want 1 and 1", ok, failed)
	}
	if code, _, err := s.adminDo(http.MethodGet, "/reload"); err != nil || code != http.StatusMethodNotAllowed {
		s.fatalf("GET /reload = %d %v, want 405", code, err)
	}
}

// TestReloadRefusesAFIFOConfig: a config path that became a FIFO is refused
// at once (reading it does not block the reload) and the old config serves on.
func TestReloadRefusesAFIFOConfig(t *testing.T) {
	x := namedBackend(t, "X")
	s := startServe(t, appConfig(x, ""))
	if err := os.Remove(s.config); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(s.config, 0o600); err != nil {
		t.Fatal(err)
	}
	code, body, err := s.adminDo(http.MethodPost, "/reload")
	if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "not a regular file (a FIFO)") {
		s.fatalf("POST /reload of a FIFO config = %d %q %v, want 400 naming the FIFO", code, body, err)
	}
	s.assertBackend("X")
}

// TestReloadRefusesRestartOnlyChanges: a new listen address cannot be applied
// by a reload, so the whole config is refused and the old one serves on.
func TestReloadRefusesRestartOnlyChanges(t *testing.T) {
	x, y := namedBackend(t, "X"), namedBackend(t, "Y")
	s := startServe(t, appConfig(x, ""))
	moved := strings.Replace(appConfig(y, ""), listenLine(), "listen: [127.0.0.1:0, 127.0.0.1:0]", 1)
	writeConfig(t, s.config, moved)
	code, body, err := s.adminDo(http.MethodPost, "/reload")
	if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "listen changed") {
		s.fatalf("POST /reload with a new listener = %d %q %v, want 400 naming listen", code, body, err)
	}
	s.assertBackend("X")
}

// TestReloadUnderLoadLosesNothing reloads ten times, alternating backends and
// triggers, while clients send requests back to back: every one must get 200.
func TestReloadUnderLoadLosesNothing(t *testing.T) {
	const (
		clients     = 4
		perClient   = 200 // successful responses each, at least
		reloads     = 10
		betweenEach = 20 // responses the clients must get between two reloads
	)
	x, y := namedBackend(t, "X"), namedBackend(t, "Y")
	s := startServe(t, appConfig(x, ""))
	s.assertBackend("X")

	var (
		total     atomic.Int64 // responses so far, all clients
		reloaded  atomic.Bool  // the reloads are done; clients may stop at perClient
		stop      = make(chan struct{})
		failMu    sync.Mutex
		failures  []string
		seen      [2]atomic.Int64 // responses from X and from Y
		clientsWG sync.WaitGroup
	)
	for c := range clients {
		clientsWG.Go(func() {
			for n := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				if n >= perClient && reloaded.Load() {
					return
				}
				code, body, err := s.get("a.test", fmt.Sprintf("/client/%d/%d", c, n))
				total.Add(1)
				switch {
				case err != nil || code != http.StatusOK:
					failMu.Lock()
					failures = append(failures, fmt.Sprintf("client %d request %d: %d %q %v", c, n, code, body, err))
					failMu.Unlock()
				case body == "X":
					seen[0].Add(1)
				case body == "Y":
					seen[1].Add(1)
				}
				n++
			}
		})
	}
	defer func() { // on a fatal failure too: the clients must not outlive the test
		select {
		case <-stop:
		default:
			close(stop)
		}
		clientsWG.Wait()
	}()

	for i := range reloads {
		// Let the clients make progress first, so every reload lands mid-load.
		mark := total.Load()
		s.eventually("clients progress before reload", func() (bool, string) {
			n := total.Load()
			return n >= mark+betweenEach, fmt.Sprintf("%d responses, want %d", n, mark+betweenEach)
		})
		backend := y
		if i%2 == 1 {
			backend = x
		}
		writeConfig(t, s.config, appConfig(backend, ""))
		if i%2 == 0 {
			s.signal(syscall.SIGHUP)
			s.waitCount(s.stderr, reloadedLine, i+1)
		} else if code, body, err := s.adminDo(http.MethodPost, "/reload"); err != nil || code != http.StatusOK {
			s.fatalf("reload %d: POST /reload = %d %q %v", i, code, body, err)
		}
	}
	reloaded.Store(true)

	finished := make(chan struct{})
	go func() { clientsWG.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		close(stop)
		s.fatalf("clients did not finish %d requests each within 20s (%d responses)", perClient, total.Load())
	}

	failMu.Lock()
	defer failMu.Unlock()
	if len(failures) > 0 {
		s.fatalf("%d of %d requests failed across %d reloads; first: %s",
			len(failures), total.Load(), reloads, strings.Join(failures[:min(len(failures), 5)], "\n"))
	}
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		s.fatalf("responses from X=%d Y=%d, want both", seen[0].Load(), seen[1].Load())
	}
	if ok, failed := s.reloads(); ok != reloads || failed != 0 {
		s.fatalf("levee_config_reloads_total ok=%v error=%v, want %d and 0", ok, failed, reloads)
	}
	t.Logf("%d requests, X=%d Y=%d, %d reloads", total.Load(), seen[0].Load(), seen[1].Load(), reloads)
}

// blockingBackend answers only when released; arrived receives each request's path.
type blockingBackend struct {
	addr    string
	arrived chan string
	release chan struct{}
	once    sync.Once
}

func newBlockingBackend(t *testing.T) *blockingBackend {
	t.Helper()
	b := &blockingBackend{arrived: make(chan string, 16), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.arrived <- r.URL.Path
		select {
		case <-b.release:
			w.Write([]byte("released"))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(b.unblock) // runs before srv.Close, which waits for handlers
	b.addr = srv.Listener.Addr().String()
	return b
}

func (b *blockingBackend) unblock() { b.once.Do(func() { close(b.release) }) }

func TestSIGTERMDrainsInFlight(t *testing.T) {
	b := newBlockingBackend(t)
	s := startServe(t, appConfig(b.addr, ""))
	if code, _, err := s.adminDo(http.MethodGet, "/readyz"); err != nil || code != http.StatusOK {
		s.fatalf("/readyz = %d %v, want 200", code, err)
	}

	type result struct {
		code int
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		code, body, err := s.get("a.test", "/slow")
		inflight <- result{code, body, err}
	}()
	select {
	case <-b.arrived:
	case r := <-inflight:
		s.fatalf("request finished before the backend released it: %+v", r)
	case <-time.After(waitTimeout):
		s.fatalf("backend did not receive the request within %v", waitTimeout)
	}

	s.signal(syscall.SIGTERM)
	proxyAddr := strings.TrimPrefix(s.proxy, "http://")
	s.eventually("draining: /readyz 503 and the proxy listener closed", func() (bool, string) {
		code, _, err := s.adminDo(http.MethodGet, "/readyz")
		if err != nil || code != http.StatusServiceUnavailable {
			return false, fmt.Sprintf("/readyz = %d %v", code, err)
		}
		conn, err := net.DialTimeout("tcp", proxyAddr, waitTimeout)
		if err == nil {
			conn.Close()
			return false, "proxy listener still accepts connections"
		}
		return true, ""
	})
	select {
	case r := <-inflight:
		s.fatalf("in-flight request ended during the drain, before the backend answered: %+v", r)
	default:
	}

	b.unblock()
	var r result
	select {
	case r = <-inflight:
	case <-time.After(waitTimeout):
		s.fatalf("in-flight request did not complete within %v of its release", waitTimeout)
	}
	if r.err != nil || r.code != http.StatusOK || r.body != "released" {
		s.fatalf("in-flight request = %d %q %v, want 200 \"released\"", r.code, r.body, r.err)
	}
	if code := s.exitCode(); code != 0 {
		s.fatalf("levee exited %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(s.stderr.String(), `msg="levee stopped" err=<nil>`) {
		s.fatalf("no clean stop logged")
	}
}

// TestSIGTERMIdleExitsAtOnce: with nothing in flight, SIGTERM exits 0 without
// waiting for drain_timeout (set far beyond the test's deadline).
func TestSIGTERMIdleExitsAtOnce(t *testing.T) {
	x := namedBackend(t, "X")
	s := startServe(t, "server: {drain_timeout: 1h}\n"+appConfig(x, ""))
	s.assertBackend("X") // leaves an idle keep-alive connection open
	s.signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 0 {
		s.fatalf("levee exited %d after SIGTERM, want 0", code)
	}
}

// TestSIGTERMDrainDeadline: a request that outlives server.drain_timeout is
// cut and levee still exits, reporting the failed drain with exit code 1.
func TestSIGTERMDrainDeadline(t *testing.T) {
	b := newBlockingBackend(t) // never released before cleanup
	s := startServe(t, "server: {drain_timeout: 50ms}\n"+appConfig(b.addr, ""))
	inflight := make(chan error, 1)
	go func() {
		_, _, err := s.get("a.test", "/stuck")
		inflight <- err
	}()
	select {
	case <-b.arrived:
	case <-time.After(waitTimeout):
		s.fatalf("backend did not receive the request within %v", waitTimeout)
	}
	s.signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 1 {
		s.fatalf("levee exited %d after a failed drain, want 1", code)
	}
	for _, want := range []string{"drain deadline passed", "levee: server: drain: context deadline exceeded"} {
		if !strings.Contains(s.stderr.String(), want) {
			s.fatalf("stderr lacks %q", want)
		}
	}
	select {
	case err := <-inflight:
		if err == nil {
			s.fatalf("the request cut by the drain deadline got a complete response")
		}
	case <-time.After(waitTimeout):
		s.fatalf("the cut request did not end within %v", waitTimeout)
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	path := writeTemp(t, appConfig("127.0.0.1:9001", "    limits: {concurrency: 0}\n"))
	code, _, stderr := runLevee(t, "serve", "--config", path)
	if code != 1 || !strings.Contains(stderr, "apps.a.limits.concurrency: must be 1..") {
		t.Fatalf("serve of a bad config exit = %d, want 1 naming the field\nstderr:\n%s", code, stderr)
	}
}
