package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const adminApp = "apps:\n  a: {hosts: [a.test], backends: ['127.0.0.1:9001']}\n"

// TestCheckRefusesOpenAdminWithoutToken: an admin listener beyond loopback
// without a token would let anyone who reaches it reload the config.
func TestCheckRefusesOpenAdminWithoutToken(t *testing.T) {
	for _, admin := range []string{"0.0.0.0:0", "'[::]:0'", "':0'", "{addr: 0.0.0.0:0, pprof: true}"} {
		t.Run(admin, func(t *testing.T) {
			code, _, stderr := runLevee(t, "check", "--config", writeTemp(t, "listen: 127.0.0.1:0\nadmin: "+admin+"\n"+adminApp))
			if code != 1 || !strings.Contains(stderr, "admin.token_file: required when admin.addr") {
				t.Fatalf("check exit = %d, stderr:\n%s\nwant 1 and an error at admin.token_file", code, stderr)
			}
		})
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeTemp(t, "listen: 127.0.0.1:0\nadmin: {addr: 0.0.0.0:0, token_file: "+tok+"}\n"+adminApp)
	if code, _, stderr := runLevee(t, "check", "--config", cfg); code != 0 {
		t.Fatalf("check with a token = %d, want 0; stderr:\n%s", code, stderr)
	}
}

// TestServeAdminToken: with admin.token_file, POST /reload needs the token;
// read-only endpoints do not, and pprof is off unless admin.pprof says so.
func TestServeAdminToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, listenLine()+"\nadmin: {addr: 127.0.0.1:0, token_file: "+tok+"}\n"+adminApp)
	reload := func(auth string) int {
		req, err := http.NewRequest(http.MethodPost, s.admin+"/reload", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		code, body, err := do(s.client, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("POST /reload (%q) = %d %s", auth, code, body)
		return code
	}
	if code := reload(""); code != http.StatusUnauthorized {
		t.Errorf("reload without a token = %d, want 401", code)
	}
	if code := reload("Bearer not-the-token-at-all-0000"); code != http.StatusUnauthorized {
		t.Errorf("reload with a wrong token = %d, want 401", code)
	}
	if code := reload("Bearer " + token); code != http.StatusOK {
		t.Errorf("reload with the token = %d, want 200", code)
	}
	if code, _, err := s.adminDo(http.MethodGet, "/metrics"); err != nil || code != http.StatusOK {
		t.Errorf("GET /metrics without a token = %d, %v; want 200", code, err)
	}
	if code, _, err := s.adminDo(http.MethodGet, "/debug/pprof/"); err != nil || code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ without admin.pprof = %d, %v; want 404", code, err)
	}
}

func TestServeAdminPprof(t *testing.T) {
	s := startServe(t, listenLine()+"\nadmin: {addr: 127.0.0.1:0, pprof: true}\n"+adminApp)
	if code, body, err := s.adminDo(http.MethodGet, "/debug/pprof/"); err != nil || code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ with admin.pprof = %d, %v; want 200 listing profiles", code, err)
	}
}
