package acme

import (
	"context"
	"errors"
	"testing"

	"github.com/leveeproxy/levee/internal/config"
)

func TestEligible(t *testing.T) {
	acmeTLS := &config.AppTLS{Mode: config.AppTLSACME}
	cfg := &config.Config{Apps: map[string]*config.App{
		"shop":  {Hosts: []string{"shop.example.com", "*.shop.example.com"}, TLS: acmeTLS},
		"plain": {Hosts: []string{"plain.example.com"}},
		"own":   {Hosts: []string{"own.example.com"}, TLS: &config.AppTLS{CertPEM: "x"}},
	}}
	stored := map[string]*config.App{
		"blog.example.org":     {Hosts: []string{"blog.example.org"}, TLS: acmeTLS},
		"x.tenant.example.org": {Hosts: []string{"*.tenant.example.org"}, TLS: acmeTLS},
	}
	loads := 0
	lookup := func(_ context.Context, host string) ([]string, *config.AppTLS, bool, error) {
		loads++
		if host == "down.example.org" {
			return nil, nil, false, errors.New("catalog unavailable")
		}
		a, ok := stored[host]
		if !ok {
			return nil, nil, false, nil
		}
		return a.Hosts, a.TLS, true, nil
	}
	steps := []struct {
		host       string
		wildcards  bool
		dflt       bool
		want       bool
		wantErr    bool
		wantLoaded bool
	}{
		{host: "shop.example.com", want: true},
		{host: "a.shop.example.com", want: false},                   // wildcard, wildcard_subdomains off
		{host: "a.shop.example.com", wildcards: true, want: true},   // and on
		{host: "plain.example.com", want: false, wantLoaded: false}, // no tls: acme
		{host: "plain.example.com", dflt: true, want: true},         // default on
		{host: "own.example.com", dflt: true, want: false},          // its own certificate
		{host: "blog.example.org", want: true, wantLoaded: true},    // a catalog app
		{host: "x.tenant.example.org", want: false, wantLoaded: true},
		{host: "x.tenant.example.org", wildcards: true, want: true, wantLoaded: true},
		{host: "nobody.example.net", want: false, wantLoaded: true},
		{host: "down.example.org", wantErr: true, wantLoaded: true},
		{host: "127.0.0.1", want: false}, // never asks the catalog
		{host: "localhost", want: false}, // one label
		{host: "a..b.com", want: false},  // malformed
		{host: "a_b.example.com", want: false},
	}
	for _, s := range steps {
		loads = 0
		a := &config.ACME{CA: "https://ca/dir", WildcardSubdomains: s.wildcards, Default: s.dflt}
		got, claimed, err := eligible(context.Background(), a, newClaims(cfg), lookup, s.host)
		if s.host == "plain.example.com" && !claimed || s.host == "nobody.example.net" && claimed {
			t.Errorf("%s: claimed %v", s.host, claimed)
		}
		if got != s.want || (err != nil) != s.wantErr || (loads > 0) != s.wantLoaded {
			t.Errorf("%+v: eligible = %v, %v (catalog asked %d times)", s, got, err, loads)
		}
	}
}
