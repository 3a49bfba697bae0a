package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// levee top reads the admin listener, which speaks HTTP/1.1 whatever the
// proxy listener does: the h2c re-run would test nothing new.
func skipTopOnRerun(t *testing.T) {
	t.Helper()
	if testH2C() {
		t.Skip("levee top tests run once")
	}
}

// startHeavyLoad runs levee with app a keyed by X-Client and sends it
// 60 requests from one client ("heavy-hitter"), 5 each from two others
// ("light-1", "light-2"), then those of extra (client → requests).
func startHeavyLoad(t *testing.T, extra map[string]int) *serveProc {
	t.Helper()
	s := startServe(t, appConfig(namedBackend(t, "b"), "    limits: {client: {key: header:X-Client}}\n"))
	send := func(client string, n int) {
		for range n {
			req, _ := http.NewRequest(http.MethodGet, s.proxy+"/", nil)
			req.Host = "a.test"
			req.Header.Set("X-Client", client)
			if code, _, err := do(s.client, req); err != nil || code != http.StatusOK {
				t.Fatalf("request as %q: %d, %v", client, code, err)
			}
		}
	}
	send("heavy-hitter", 60)
	send("light-1", 5)
	send("light-2", 5)
	for client, n := range extra {
		send(client, n)
	}
	return s
}

// topSnapshot is the part of `levee top --once --json` the tests read.
type topSnapshot struct {
	Time     string
	Instance struct {
		Role  string
		Build struct{ Version string }
	}
	Apps []struct {
		Name              string
		RequestsPerSecond float64 `json:"requests_per_second"`
	}
	Total int
	App   struct {
		Name     string
		Backends []struct{ Addr string }
	}
	Top topReport
}

// topReport is GET /api/apps/{app}/top, as the tests read it.
type topReport struct {
	By, Window string
	ErrorBound uint64 `json:"error_bound"`
	Clients    []struct {
		Client string
		Count  uint64
		Share  float64
	}
}

// TestTopOnceJSONNamesTheHeaviestClient: under load where one client of
// app a sends most requests, `levee top --once --json` names it first,
// with --app and (a being the busiest) without.
func TestTopOnceJSONNamesTheHeaviestClient(t *testing.T) {
	skipTopOnRerun(t)
	s := startHeavyLoad(t, nil)
	for _, args := range [][]string{
		{"--admin", s.admin, "--app", "a", "--window", "1m"},
		{"--admin", strings.TrimPrefix(s.admin, "http://"), "--window", "10m", "--by", "requests"},
	} {
		code, stdout, stderr := runLevee(t, append(append([]string{"top"}, args...), "--once", "--json")...)
		if code != 0 || stderr != "" {
			t.Fatalf("levee top %v: exit %d\n%s", args, code, stderr)
		}
		var snap topSnapshot
		if err := json.Unmarshal([]byte(stdout), &snap); err != nil {
			t.Fatalf("levee top %v: %v in\n%s", args, err, stdout)
		}
		if snap.Time == "" || snap.Instance.Role != "active" || snap.Instance.Build.Version == "" || snap.Total != 1 ||
			len(snap.Apps) != 1 || snap.App.Name != "a" || len(snap.App.Backends) != 1 {
			t.Fatalf("levee top %v: %+v", args, snap)
		}
		top := snap.Top
		if top.By != "requests" || len(top.Clients) != 3 || top.Clients[0].Client != "heavy-hitter" ||
			top.Clients[0].Count != 60 || top.ErrorBound != 0 || top.Clients[0].Share < 0.8 {
			t.Fatalf("levee top %v: top %+v; want heavy-hitter first with 60 of 70", args, top)
		}
	}
}

// TestTopOncePlainSanitizesClients: a client name holding what terminals
// obey (a C1 CSI, a bidi override, a tab; ESC itself cannot pass an HTTP
// header, the renderer's tests cover it) is printed escaped, and the frame
// holds no escape codes at all.
func TestTopOncePlainSanitizesClients(t *testing.T) {
	skipTopOnRerun(t)
	hostile := "evil\u202e\u009b31m\tx"
	s := startHeavyLoad(t, map[string]int{hostile: 2})
	code, stdout, stderr := runLevee(t, "top", "--admin", s.admin, "--app", "a", "--window", "1m", "--once")
	if code != 0 {
		t.Fatalf("levee top --once: exit %d\n%s", code, stderr)
	}
	for _, bad := range []string{"\x1b", "\u202e", "\u009b", "\t"} {
		if strings.Contains(stdout, bad) {
			t.Fatalf("output holds %q raw:\n%s", bad, stdout)
		}
	}
	lines := strings.Split(stdout, "\n")
	i := indexPrefix(lines, "TOP CLIENTS of a by requests over 1m")
	if i < 0 || i+2 >= len(lines) || !strings.HasSuffix(lines[i+2], " heavy-hitter") {
		t.Fatalf("no top clients section with heavy-hitter first:\n%s", stdout)
	}
	if want := `evil\u202e\u009b31m\tx`; !strings.Contains(stdout, want) {
		t.Fatalf("output lacks the escaped name %s:\n%s", want, stdout)
	}
}

func indexPrefix(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return i
		}
	}
	return -1
}

// TestTopErrors: an admin that does not answer, an unknown app, bad flags
// and no terminal each end levee top with a sentence, never a trace.
func TestTopErrors(t *testing.T) {
	skipTopOnRerun(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	s := startHeavyLoad(t, nil)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--admin", closed, "--once", "--json"}, 1, "admin unreachable: " + closed},
		{[]string{"--admin", closed, "--once"}, 1, "connection refused"},
		{[]string{"--admin", s.admin, "--app", "nope", "--once", "--json"}, 1, `no such app: "nope"`},
		{[]string{"--admin", s.admin}, 1, "standard output is not a terminal"},
		{[]string{"--admin", s.admin, "--by", "cpu", "--once"}, exitUsage, "--by must be one of [requests rejected bytes items]"},
		{[]string{"--admin", s.admin, "--window", "1h", "--once"}, exitUsage, "--window must be one of [10s 1m 10m]"},
		{[]string{"--admin", s.admin, "--json"}, exitUsage, "--json needs --once"},
		{[]string{"--admin", s.admin, "--config", s.config}, exitUsage, "not both"},
		{[]string{"--admin", "ftp://x"}, 1, "want a URL such as http://127.0.0.1:9901"},
		{[]string{"--config", filepath.Join(t.TempDir(), "none.yaml"), "--once"}, 1, "none.yaml"},
	} {
		code, stdout, stderr := runLevee(t, append([]string{"top"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" ||
			strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
			t.Errorf("levee top %v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// TestTopAdminAddress: the admin URL comes from --admin, else the
// config's admin.addr (an unspecified host reached on loopback), else the
// default's.
func TestTopAdminAddress(t *testing.T) {
	skipTopOnRerun(t)
	path := filepath.Join(t.TempDir(), "levee.yaml")
	writeConfig(t, path, strings.Replace(appConfig("127.0.0.1:9", ""), "admin: 127.0.0.1:0", "admin: 127.0.0.1:9911", 1))
	for _, tc := range []struct{ admin, config, want string }{
		{"", "", "http://127.0.0.1:9901"},
		{"", path, "http://127.0.0.1:9911"},
		{"127.0.0.1:7", "", "http://127.0.0.1:7"},
		{"https://levee.internal:9901/", "", "https://levee.internal:9901"},
	} {
		if got, err := topAdmin(tc.admin, tc.config); err != nil || got != tc.want {
			t.Errorf("topAdmin(%q, %q) = %q, %v; want %q", tc.admin, tc.config, got, err, tc.want)
		}
	}
	for addr, want := range map[string]string{":9901": "http://127.0.0.1:9901", "[::]:9901": "http://[::1]:9901", "10.0.0.1:9901": "http://10.0.0.1:9901"} {
		if got, err := adminURL(addr); err != nil || got != want {
			t.Errorf("adminURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
}
