package config

import (
	"strings"
	"testing"
)

// A stored app says tls: acme in JSON as the config file does in YAML.
func TestParseAppACME(t *testing.T) {
	a, err := ParseApp("shop", []byte(`{"hosts":["shop.example.com"],"backends":["127.0.0.1:9"],"tls":"acme"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !a.TLS.ACME() {
		t.Fatalf("tls = %+v, want acme", a.TLS)
	}
	if c, err := a.TLS.Certificate(); c != nil || err != nil {
		t.Fatalf("Certificate() = %v, %v; want none of its own", c, err)
	}
	_, err = ParseApp("shop", []byte(`{"hosts":["shop.example.com"],"backends":["127.0.0.1:9"],"tls":"acm"}`))
	if err == nil || !strings.Contains(err.Error(), "apps.shop.tls: \"acm\" is not acme") {
		t.Fatalf("err = %v", err)
	}
}

func TestACMEWants(t *testing.T) {
	on := ACME{CA: "https://ca/dir"}
	acme, listener, own := &AppTLS{Mode: AppTLSACME}, &AppTLS{Mode: AppTLSListener}, &AppTLS{CertPEM: "x"}
	for _, c := range []struct {
		a    ACME
		t    *AppTLS
		want bool
	}{
		{ACME{}, acme, false}, // off: never
		{on, acme, true},
		{on, nil, false},
		{ACME{CA: on.CA, Default: true}, nil, true},
		{ACME{CA: on.CA, Default: true}, listener, false},
		{ACME{CA: on.CA, Default: true}, own, false},
	} {
		if got := c.a.Wants(c.t); got != c.want {
			t.Errorf("%+v.Wants(%+v) = %v, want %v", c.a, c.t, got, c.want)
		}
	}
}

func TestParseACMEKey(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for _, c := range []struct {
		in string
		ok bool
	}{
		{hex64, true},
		{" " + hex64 + "\n", true},
		{"q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k=", true}, // base64 of 32 bytes
		{hex64[:62], false}, // 31 bytes
		{"", false},
		{"not a key", false},
	} {
		k, err := ParseACMEKey([]byte(c.in))
		if (err == nil) != c.ok || (c.ok && len(k) != ACMEKeyBytes) {
			t.Errorf("ParseACMEKey(%q) = %d bytes, %v; want ok %v", c.in, len(k), err, c.ok)
		}
	}
}

// A reload compares tls.acme whole, the key as read included.
func TestACMESame(t *testing.T) {
	a := ACME{CA: "https://ca/dir", Challenges: []string{ChallengeHTTP}, key: []byte("k1")}
	b := a
	b.Challenges = []string{ChallengeHTTP}
	if !a.Same(&b) {
		t.Fatal("equal configs differ")
	}
	b.key = []byte("k2")
	if a.Same(&b) {
		t.Fatal("another key (same file name) is the same")
	}
	b.key, b.Budgets.Orders.Max = a.key, 1
	if a.Same(&b) {
		t.Fatal("another budget is the same")
	}
}
