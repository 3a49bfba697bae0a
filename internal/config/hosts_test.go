package config

import (
	"strings"
	"testing"
)

// TestHostsValidated: apps.NAME.hosts entries are DNS names, wildcards over
// one, or IP literals; anything else is refused at its field path.
func TestHostsValidated(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	long := strings.Repeat(label63+".", 4)[:250] + ".com" // 254 bytes
	for _, tc := range []struct {
		name, host string
		want       string // "" when the host is valid
	}{
		{"name", "photos.example.com", ""},
		{"single label", "localhost", ""},
		{"upper case", "Photos.Example.COM", ""},
		{"digits and hyphen", "a-1.b2.example", ""},
		{"underscore", "_acme.example.com", ""},
		{"wildcard", "*.example.com", ""},
		{"63-byte label", label63 + ".com", ""},
		{"253 bytes", long[:249] + ".com", ""},
		{"ipv4", "192.0.2.1", ""},
		{"ipv6 bracketed", "[2001:db8::1]", ""},

		{"NUL", "a\x00.example.com", "control byte or space 0x00"},
		{"TAB", "a\t.example.com", "control byte or space 0x09"},
		{"LF", "a.example.com\n", "control byte or space 0x0a"},
		{"CR", "a\r.example.com", "control byte or space 0x0d"},
		{"space", "a example.com", "control byte or space 0x20"},
		{"DEL", "a\x7f.com", "control byte or space 0x7f"},
		{"non-ASCII", "exämple.com", "byte"},
		{"slash", "a.com/x", "byte '/'"},
		{"empty label", "a..b", "empty label"},
		{"leading dot", ".a.com", "empty label"},
		{"trailing dot", "a.com.", "empty label"},
		{"wildcard alone", "*.", "empty"},
		{"label of 64", strings.Repeat("a", 64) + ".com", "label longer than 63 bytes"},
		{"254 bytes", long, "longer than 253 bytes"},
		{"leading hyphen", "-a.com", "starts or ends with '-'"},
		{"trailing hyphen", "a-.com", "starts or ends with '-'"},
		{"ipv4 out of range", "256.0.0.1", "not a valid IPv4 address"},
		{"ipv4 short", "1.2.3", "not a valid IPv4 address"},
		{"ipv4 leading zero", "01.2.3.4", "not a valid IPv4 address"},
		{"wildcard over ipv4", "*.2.3.4", "not a valid IPv4 address"},
		{"port", "a.com:80", "a port"},
		{"ipv6 bare", "2001:db8::1", "a port, or an IPv6 address without [ ]"},
		{"ipv6 bad", "[2001:db8::g]", "not an IPv6 literal"},
		{"ipv6 unclosed", "[::1", "not an IPv6 literal"},
		{"ipv4 in brackets", "[192.0.2.1]", "not an IPv6 literal"},
		{"wildcard inside", "a.*.com", "only a leading *."},
		{"double wildcard", "*.*.com", "only a leading *."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "apps: {a: {hosts: [a.test, " + yamlQuote(tc.host) + "], backends: ['127.0.0.1:9001']}}"
			_, err := Parse([]byte(src))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("host %q refused: %v", tc.host, err)
				}
				return
			}
			es := parseErrs(t, src)
			if len(es) != 1 || es[0].Path != "apps.a.hosts[1]" || !strings.Contains(es[0].Msg, tc.want) {
				t.Fatalf("host %q: errors %v, want one at apps.a.hosts[1] containing %q", tc.host, es, tc.want)
			}
		})
	}
}

// yamlQuote writes s as a double-quoted YAML scalar, escaping every byte
// outside printable ASCII so control bytes reach the decoder as written.
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x` + string("0123456789abcdef"[r>>4]) + string("0123456789abcdef"[r&15]))
		default:
			b.WriteRune(r)
		}
	}
	return b.String() + `"`
}

// A stored app (the catalog's import and load, config.ParseApp) is held to
// the same host rules as the config file's apps.
func TestStoredAppHostsValidated(t *testing.T) {
	_, err := ParseApp("shop", []byte(`{"hosts": ["a..b"], "backends": ["127.0.0.1:9"]}`))
	if err == nil || !strings.Contains(err.Error(), "apps.shop.hosts[0]") {
		t.Fatalf("ParseApp with host a..b: %v, want an error at apps.shop.hosts[0]", err)
	}
}
