package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminForms(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("  0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src string
		want      Admin
	}{
		{"scalar", "admin: 127.0.0.1:9902", Admin{Addr: "127.0.0.1:9902"}},
		{"absent", "", Admin{Addr: DefaultAdmin}},
		{"mapping keeps the default addr", "admin: {pprof: true}", Admin{Addr: DefaultAdmin, Pprof: true}},
		{"mapping", "admin: {addr: 0.0.0.0:9902, token_file: " + tok + "}", Admin{Addr: "0.0.0.0:9902", TokenFile: tok}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if cfg := mustParse(t, tt.src); cfg.Admin != tt.want {
				t.Fatalf("Admin = %+v, want %+v", cfg.Admin, tt.want)
			}
		})
	}
	got, err := Admin{TokenFile: tok}.Token()
	if err != nil || got != "0123456789abcdef0123" {
		t.Fatalf("Token() = %q, %v; want the file's token, trimmed", got, err)
	}
}

func TestAdminTokenRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, content, frag string }{
		{"empty", "", "shorter than 16 bytes"},
		{"white space", " \n\t\n", "shorter than 16 bytes"},
		{"short", "hunter2\n", "shorter than 16 bytes"},
		{"too large", strings.Repeat("x", MaxTokenBytes+1), "larger than 4096 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			es := parseErrs(t, "admin: {addr: 0.0.0.0:9901, token_file: '"+p+"'}")
			if len(es) != 1 {
				t.Fatalf("want one error, got %v", es)
			}
			wantErr(t, es, "admin.token_file", tt.frag)
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.9.9.9:1": true, "[::1]:1": true, "localhost:1": true,
		"0.0.0.0:1": false, "[::]:1": false, ":1": false, "10.0.0.1:1": false, "[fe80::1]:1": false, "nope": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
