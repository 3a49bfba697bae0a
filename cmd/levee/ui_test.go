package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// The dashboard test drives Debian's chromium headless; CI installs it and
// sets requireChromiumEnv=1, so there a missing browser fails the test
// instead of skipping it. With updateScreenshotEnv=1 the test writes its
// screenshot to docs/img/dashboard.png (the README shows it).
const (
	requireChromiumEnv  = "LEVEE_REQUIRE_CHROMIUM"
	updateScreenshotEnv = "LEVEE_UPDATE_SCREENSHOT"
	screenshotPath      = "../../docs/img/dashboard.png"
)

// Bounds of the dashboard test: the browser's whole life, and the load.
const (
	uiTestTimeout = 45 * time.Second
	uiLoadMax     = 20_000 // requests, at most
)

// uiClients is one round of the load: the heavy client sends 7 of every
// 10 requests. The last name is markup the page must show as text.
var uiClients = []string{
	"heavy-hitter", "heavy-hitter", "light-1", "heavy-hitter", "heavy-hitter",
	"light-2", "heavy-hitter", "heavy-hitter", uiEvilClient, "heavy-hitter",
}

const uiEvilClient = `<img src=x onerror="document.title='xss'">`

// TestUIDashboardNamesTheHeaviestClient: against a running levee under load
// (one heavy client, two light ones, one whose name is an HTML element),
// headless Chromium renders /ui/?app=a from the live event stream until
// the top-clients table names the heavy client first. The page breaks no
// rule of its Content-Security-Policy, throws nothing, and shows the
// hostile name as text. The browser and the load stop with the test.
func TestUIDashboardNamesTheHeaviestClient(t *testing.T) {
	if testH2C() {
		t.Skip("the dashboard is the admin listener's (HTTP/1.1); the h2c re-run adds nothing")
	}
	chromium := lookChromium(t)
	leaktest.Check(t)
	// Backends that take a few milliseconds, so requests overlap and some
	// wait for one of the two slots; the heavy client goes over its rate
	// and the app over its shadowed one: the page has refusals of both
	// kinds to draw.
	backends := delayedBackend(t, "b1", 3*time.Millisecond) + ", " + delayedBackend(t, "b2", 3*time.Millisecond)
	s := startServe(t, appConfig(backends, `    limits:
      concurrency: 2
      rate: 150/s
      client: {key: header:X-Client, rate: 120/s}
      shadow: [rate]
`))

	resp, err := s.client.Get(s.admin + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode != http.StatusOK ||
		!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Fatalf("GET /ui/ = %d, Content-Security-Policy %q", resp.StatusCode, csp)
	}

	ctx, cancel := context.WithTimeout(context.Background(), uiTestTimeout)
	defer cancel()
	stopLoad := driveUILoad(ctx, s)
	defer stopLoad()

	profile := t.TempDir()
	browser, stopBrowser := startChromium(ctx, t, chromium, profile)
	problems, stopConsole := collectConsole(browser)
	defer func() {
		stopBrowser()
		stopConsole()
		// No process of the browser this test started outlives it.
		s.eventually("chromium gone", func() (bool, string) {
			left := processesNaming(profile)
			return len(left) == 0, fmt.Sprint(left)
		})
	}()

	if err := chromedp.Do(browser,
		chromedp.EmulateViewport(1400, 780),
		chromedp.Navigate(s.admin+"/ui/?app=a"),
	); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	first := `(() => {
		const td = document.querySelector('#top tbody tr:first-child td.client');
		return td && td.textContent === 'heavy-hitter' && document.querySelectorAll('#top td.client').length >= 4 ? td.textContent : null;
	})()`
	got, err := chromedp.Run(browser, chromedp.Poll[string](first,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		rows, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.querySelector('#top') ? document.querySelector('#top').innerText : document.body.innerText`))
		t.Fatalf("the top-clients table never named heavy-hitter first: %v\npage shows:\n%s", err, rows)
	}
	if got != "heavy-hitter" {
		t.Fatalf("first client %q", got)
	}

	// The hostile name is in the table as text, and nothing it holds ran.
	type domCheck struct {
		Imgs   int    `json:"imgs"`
		Title  string `json:"title"`
		Evil   bool   `json:"evil"`
		Status string `json:"status"`
	}
	dom, err := chromedp.Run(browser, chromedp.Evaluate[domCheck](`({
		imgs: document.getElementsByTagName('img').length,
		title: document.title,
		evil: [...document.querySelectorAll('#top td.client')].some((td) => td.textContent === `+jsString(uiEvilClient)+`),
		status: document.getElementById('status').textContent,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if dom.Imgs != 0 || dom.Title != "levee" || !dom.Evil || dom.Status != "live" {
		t.Fatalf("page: %+v; want no img element, title levee, the hostile client name shown as text, status live", dom)
	}

	if os.Getenv(updateScreenshotEnv) == "1" {
		// Let the charts gather a few seconds of history for the picture;
		// the assertions above did not need it.
		if err := chromedp.Do(browser, chromedp.Sleep(20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	if os.Getenv(updateScreenshotEnv) == "1" {
		if err := os.WriteFile(screenshotPath, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", screenshotPath, len(png))
	}
	// by= reconnects the stream: only the heavy client is over its rate.
	rejected := `(() => {
		const tds = document.querySelectorAll('#top td.client');
		return location.search.includes('by=rejected') && tds.length === 1 ? tds[0].textContent : null;
	})()`
	if _, err := chromedp.Run(browser, chromedp.Evaluate[bool](`(() => {
		const by = document.getElementById('by');
		by.value = 'rejected';
		return by.dispatchEvent(new Event('change'));
	})()`)); err != nil {
		t.Fatal(err)
	}
	got, err = chromedp.Run(browser, chromedp.Poll[string](rejected,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil || got != "heavy-hitter" {
		t.Fatalf("by=rejected: %q, %v; want heavy-hitter alone", got, err)
	}
	for _, m := range problems() {
		t.Errorf("browser console: %s", m)
	}
}

// lookChromium finds Debian's chromium, or skips t (fails it with
// LEVEE_REQUIRE_CHROMIUM=1).
func lookChromium(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(requireChromiumEnv) == "1" {
			t.Fatalf("chromium not found and %s=1: %v", requireChromiumEnv, err)
		}
		t.Skipf("chromium not installed (apt-get install chromium); set %s=1 to fail instead", requireChromiumEnv)
	}
	return bin
}

// startChromium starts a headless chromium with its profile in dir. stop
// ends it and waits for the browser process to exit.
func startChromium(ctx context.Context, t *testing.T, bin, dir string) (browser context.Context, stop func()) {
	t.Helper()
	// The defaults run headless, with a small /dev/shm tolerated.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(dir),
		chromedp.NoSandbox, // tests and CI run as root, where the sandbox cannot start
		chromedp.DisableGPU,
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	// The first Run starts the browser; it lives as long as browser does.
	if err := chromedp.Do(browser); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start %s: %v", bin, err)
	}
	return browser, func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process
	}
}

// collectConsole gathers the page's exceptions, console errors and browser
// log warnings (a CSP refusal is one) until browser ends; problems returns
// those seen so far, and wait returns once browser has ended and the
// collecting has stopped.
func collectConsole(browser context.Context) (problems func() []string, wait func()) {
	var mu sync.Mutex
	var seen []string
	msgs := chromedp.Console(browser)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				mu.Lock()
				seen = append(seen, m.String())
				mu.Unlock()
			}
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}, wg.Wait
}

// driveUILoad sends requests to app a as the uiClients, from three workers
// pacing themselves, until ctx ends, stop is called, or uiLoadMax were
// sent. stop returns once the workers have.
func driveUILoad(ctx context.Context, s *serveProc) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			tick := time.NewTicker(12 * time.Millisecond) // ~250 requests/s from the three
			defer tick.Stop()
			for i := w; sent.Add(1) <= uiLoadMax; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.proxy+"/", nil)
				req.Host = "a.test"
				req.Header.Set("X-Client", uiClients[i%len(uiClients)])
				_, _, _ = do(s.client, req) // 429s are part of the picture
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// delayedBackend is namedBackend answering after d, so requests overlap
// and some wait in the app's queue.
func delayedBackend(t *testing.T, name string, d time.Duration) string {
	t.Helper()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b.Listener.Addr().String()
}

// processesNaming lists the processes with dir on their command line:
// chromium's helpers (renderer, zygote, GPU) all name the profile.
func processesNaming(dir string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			found = append(found, fmt.Sprintf("%s %.80q", filepath.Base(filepath.Dir(f)), bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return found
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	return fmt.Sprintf("%q", s) // Go's quoting is valid JavaScript for ASCII
}
