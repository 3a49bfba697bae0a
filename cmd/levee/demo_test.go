package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

var demoURLs = regexp.MustCompile(`(?m)^  proxy  http://(\S+)\n  admin  http://(\S+)`)

func TestDemoSmoke(t *testing.T) {
	p := startLevee(t, "demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	m := p.waitOutput(p.stdout, demoURLs)
	proxy, admin := m[1], m[2]
	if strings.HasSuffix(proxy, ":0") || strings.HasSuffix(admin, ":0") {
		p.fatalf("demo printed unbound addresses: proxy %s admin %s", proxy, admin)
	}
	if !strings.Contains(p.stdout.String(), "curl -H 'Host: photos.localhost' http://"+proxy+"/") {
		p.fatalf("demo does not print a curl command for the bound proxy address")
	}

	c := &http.Client{Timeout: waitTimeout}
	req, err := http.NewRequest(http.MethodGet, "http://"+proxy+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "photos.localhost"
	code, body, err := do(c, req)
	if err != nil || code != http.StatusOK {
		p.fatalf("GET photos.localhost = %d %q %v, want 200", code, body, err)
	}
	var got struct {
		Backend string `json:"backend"`
		Host    string `json:"host"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || !strings.HasPrefix(got.Backend, "photos-") {
		p.fatalf("GET photos.localhost body %q (%v): want JSON with \"backend\":\"photos-N\"", body, err)
	}
	if code, _, err := do(c, mustGet(t, "http://"+admin+"/readyz")); err != nil || code != http.StatusOK {
		p.fatalf("demo /readyz = %d %v, want 200", code, err)
	}

	p.signal(syscall.SIGINT)
	if code := p.exitCode(); code != 0 {
		p.fatalf("levee demo exited %d after SIGINT, want 0", code)
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
