package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/h1loop"
	"github.com/leveeproxy/levee/internal/testlog"
)

// proxy is a real levee Server on a loopback port, for end-to-end tests.
type proxy struct {
	t    testing.TB
	srv  *Server
	URL  string // http://127.0.0.1:PORT of the first listener
	logs *testlog.Buffer
	stop context.CancelFunc
	done chan error
}

// startProxy parses yamlCfg (listen and admin default to free loopback
// ports), starts levee on it and stops it when the test ends.
func startProxy(t testing.TB, yamlCfg string) *proxy {
	t.Helper()
	return startProxyClock(t, yamlCfg, nil)
}

// startProxyClock is startProxy with levee's clock injected (nil: real).
func startProxyClock(t testing.TB, yamlCfg string, clk clock.Clock) *proxy {
	t.Helper()
	return startProxyOptions(t, yamlCfg, Options{Clock: clk})
}

// startProxyOptions is startProxy with levee's collaborators injected; the
// logger is always the proxy's log buffer.
func startProxyOptions(t testing.TB, yamlCfg string, o Options) *proxy {
	t.Helper()
	return startProxyWith(t, mustParse(t, yamlCfg), o, nil)
}

// startProxyConfig starts levee on a parsed cfg, running between (if
// set) after New and before Listen.
func startProxyConfig(t testing.TB, cfg *config.Config, between func()) *proxy {
	t.Helper()
	return startProxyWith(t, cfg, Options{}, between)
}

func startProxyWith(t testing.TB, cfg *config.Config, o Options, between func()) *proxy {
	t.Helper()
	return startProxyHooks(t, cfg, o, between, nil)
}

// startProxyHooks is startProxyWith, running listened (if set) after
// Listen and before Serve: where a test reaches into the bound listeners
// before a request can arrive.
func startProxyHooks(t testing.TB, cfg *config.Config, o Options, between func(), listened func(*Server)) *proxy {
	t.Helper()
	p := &proxy{t: t, logs: &testlog.Buffer{}, done: make(chan error, 1)}
	o.Logger = slog.New(slog.NewTextHandler(p.logs, nil))
	p.srv = New(cfg, o)
	if between != nil {
		between()
	}
	if err := p.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	if listened != nil {
		listened(p.srv)
	}
	p.URL = "http://" + p.srv.Addrs()[0].String()
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { p.done <- p.srv.Serve(ctx) }()
	t.Cleanup(func() {
		p.Stop()
	})
	return p
}

// Stop drains the proxy and waits for Serve to return (idempotent).
func (p *proxy) Stop() error {
	p.stop()
	select {
	case err, ok := <-p.done:
		if ok {
			close(p.done)
		}
		return err
	case <-time.After(30 * time.Second):
		p.t.Error("proxy did not stop within 30s")
		return errors.New("stuck")
	}
}

// mustParse parses a test config; listen/admin default to free loopback ports.
func mustParse(t testing.TB, yamlCfg string) *config.Config {
	t.Helper()
	if !strings.Contains(yamlCfg, "listen:") {
		yamlCfg = "listen: 127.0.0.1:0\n" + yamlCfg
	}
	if !strings.Contains(yamlCfg, "admin:") {
		yamlCfg = "admin: 127.0.0.1:0\n" + yamlCfg
	}
	cfg, err := config.Parse([]byte(yamlCfg))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlCfg)
	}
	if !strings.Contains(yamlCfg, "event_loop:") {
		// The default run is fasthttp's engine; the h1loop run the loops'
		// (the default on linux).
		cfg.Server.EventLoop = testLoop()
	}
	if testH2C() && !strings.Contains(yamlCfg, "h2c:") {
		for i, l := range cfg.Listen {
			if l.TLS == nil {
				cfg.Listen[i].H2C = true
			}
		}
	}
	return cfg
}

// protoEnv, set to h2c, runs the package's tests over HTTP/2: every plain
// listener of a test proxy serves h2c beside HTTP/1.1, and the default
// client (p.get, http.Get) speaks h2c only. Tests that write raw HTTP/1.1
// bytes still reach the HTTP/1.1 engine of the same listener. TestMain runs
// the package once more so.
const protoEnv = "LEVEE_TEST_PROTO"

func testH2C() bool { return os.Getenv(protoEnv) == "h2c" }

// testLoop: protoEnv is h1loop, and the listeners (plain or TLS) of test proxies
// serve HTTP/1.1 from event loops (server.event_loop).
func testLoop() bool { return os.Getenv(protoEnv) == "h1loop" }

// testProto names the protocol of the run, for labels that must differ
// between runs (cluster key prefixes).
func testProto() string {
	if testH2C() {
		return "h2c"
	}
	if testLoop() {
		return "h1loop"
	}
	return "http1"
}

// skipOnH2C skips a test of HTTP/1.1 behaviour in the h2c run, saying why.
func skipOnH2C(t *testing.T, why string) {
	t.Helper()
	if testH2C() {
		t.Skipf("HTTP/1.1 only (%s); covered by the http1 run", why)
	}
}

// TestMain runs the tests over HTTP/1.1 (served by fasthttp), then runs
// this same test binary again over h2c (levee's HTTP/2 server) and over
// HTTP/1.1 from the event loops (linux), so that `go test ./...` covers
// every engine.
func TestMain(m *testing.M) {
	if testLoop() {
		os.Exit(m.Run())
	}
	if testH2C() {
		tr := http.DefaultTransport.(*http.Transport)
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		os.Exit(m.Run())
	}
	code := m.Run()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// A fuzzer explores inputs, not protocols (the framing fuzzers pin
		// theirs): running it again would double its time, not its reach.
		os.Exit(code)
	}
	// Benchmarks name their protocols and ran already: only tests run again,
	// and without the profiles, which the child would overwrite.
	args := slices.DeleteFunc(slices.Clone(os.Args[1:]), func(a string) bool {
		return slices.ContainsFunc([]string{"cpuprofile", "memprofile", "blockprofile", "mutexprofile", "trace"},
			func(f string) bool { return strings.HasPrefix(a, "-test."+f+"=") })
	})
	runs := []string{"h2c"}
	if h1loop.Supported {
		runs = append(runs, "h1loop") // HTTP/1.1 from the event loops (server.event_loop)
	}
	for _, proto := range runs {
		fmt.Fprintf(os.Stderr, "=== protocol %s: %s=%s %s\n", proto, protoEnv, proto, os.Args[0])
		cmd := exec.Command(os.Args[0], append(args, "-test.bench=^$")...)
		cmd.Env = append(os.Environ(), protoEnv+"="+proto)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "--- FAIL: protocol %s: %v\n", proto, err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// get sends a GET for host and path through the proxy.
func (p *proxy) get(host, path string) *http.Response {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("GET %s%s: %v", host, path, err)
	}
	return resp
}

// readAll reads and closes a response body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// metric returns the value of the series name{labels} in the proxy's
// registry, or 0 when it does not exist.
func (p *proxy) metric(name string, labels map[string]string) float64 {
	p.t.Helper()
	return p.metrics(name, labels, true)
}

// metricSum returns the sum of every series of name whose labels include
// labels (0 when there is none).
func (p *proxy) metricSum(name string, labels map[string]string) float64 {
	p.t.Helper()
	return p.metrics(name, labels, false)
}

// metrics sums the values of the series name{labels}, or returns the
// first one's if first is set.
func (p *proxy) metrics(name string, labels map[string]string, first bool) float64 {
	p.t.Helper()
	mfs, err := p.srv.metrics.Registry.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			default:
				continue
			}
			if first {
				return v
			}
			sum += v
		}
	}
	return sum
}
