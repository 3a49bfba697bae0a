package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestServeAPINamesTheHeaviestClient: against a running levee under load
// from one heavy client and a few light ones, GET /api/apps/a/top, the app
// list, the instance and one server-sent event all show it.
func TestServeAPINamesTheHeaviestClient(t *testing.T) {
	s := startHeavyLoad(t, nil)

	var top topReport
	getJSON(t, s, "/api/apps/a/top?by=requests&window=1m", &top)
	if top.By != "requests" || top.Window != "1m" || len(top.Clients) != 3 || top.Clients[0].Client != "heavy-hitter" ||
		top.Clients[0].Count != 60 || top.ErrorBound != 0 {
		t.Fatalf("top: %+v; want heavy-hitter first with 60 of 3 clients, exact", top)
	}
	var apps struct {
		Apps []struct {
			Name  string
			Hosts []string
		}
		Total int
	}
	getJSON(t, s, "/api/apps", &apps)
	if apps.Total != 1 || apps.Apps[0].Name != "a" || apps.Apps[0].Hosts[0] != "a.test" {
		t.Fatalf("apps: %+v", apps)
	}
	var in struct {
		Role           string
		ConfigChecksum string `json:"config_checksum"`
		ConfigFile     string `json:"config_file"`
		Build          struct{ Version string }
	}
	getJSON(t, s, "/api/instance", &in)
	if in.Role != "active" || !strings.HasPrefix(in.ConfigChecksum, "sha256:") || in.ConfigFile != s.config || in.Build.Version == "" {
		t.Fatalf("instance: %+v", in)
	}
	for path, want := range map[string]int{
		"/api/apps/nope":                   http.StatusNotFound,
		"/api/apps/nope/top":               http.StatusNotFound,
		"/api/apps/a/top?by=cpu":           http.StatusBadRequest,
		"/api/apps/a/top?window=1h":        http.StatusBadRequest,
		"/api/apps?limit=-1":               http.StatusBadRequest,
		"/api/events?app=a&window=forever": http.StatusBadRequest,
		"/api/events?app=nope":             http.StatusNotFound,
	} {
		code, body, err := s.adminDo(http.MethodGet, path)
		var e struct{ Error string }
		if err != nil || code != want || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET %s = %d %q, %v; want %d with a JSON error", path, code, body, err, want)
		}
	}

	// One event of the stream for app a: it names the heavy client.
	resp, err := s.client.Get(s.admin + "/api/events?app=a&window=10m")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Apps []struct{ Name string }
			Top  struct {
				Clients []struct{ Client string }
			}
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		if len(ev.Apps) != 1 || len(ev.Top.Clients) == 0 || ev.Top.Clients[0].Client != "heavy-hitter" {
			t.Fatalf("event: %s", line)
		}
		return
	}
	t.Fatalf("no event: %v", sc.Err())
}

func getJSON(t *testing.T, s *serveProc, path string, v any) {
	t.Helper()
	code, body, err := s.adminDo(http.MethodGet, path)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s = %d %s, %v", path, code, body, err)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}
