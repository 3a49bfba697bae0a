package config

import (
	"slices"
	"testing"

	"github.com/leveeproxy/levee/internal/reply"
)

func TestParseShadow(t *testing.T) {
	tests := []struct {
		name, shadow string
		want         Shadow
	}{
		{"absent", ``, nil},
		{"false", `shadow: false`, nil},
		{"true is every shadowable reason", `shadow: true`, Shadow(reply.Shadowable)},
		{"a list", `shadow: [rate, batch-items]`, Shadow{"rate", "batch-items"}},
		{"empty list", `shadow: []`, Shadow{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, appWith(`limits: {`+tt.shadow+`}`))
			got := cfg.Apps["a"].Limits.Shadow
			if !slices.Equal(got, tt.want) {
				t.Errorf("Shadow = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestShadowTrueCopiesTheList: an app's list is its own, never the
// package's vocabulary.
func TestShadowTrueCopiesTheList(t *testing.T) {
	s := mustParse(t, appWith(`limits: {shadow: true}`)).Apps["a"].Limits.Shadow
	s[0] = "changed"
	if reply.Shadowable[0] == "changed" {
		t.Fatal("shadow: true shares reply.Shadowable")
	}
}

func TestShadowHas(t *testing.T) {
	s := Shadow{"rate", "body"}
	if !s.Has("rate") || !s.Has("body") || s.Has("client-rate") || Shadow(nil).Has("rate") {
		t.Errorf("Has is wrong for %q", s)
	}
}

// TestShadowAliasedLimits: shadow travels with an aliased limits mapping,
// as every other limits key does.
func TestShadowAliasedLimits(t *testing.T) {
	cfg := mustParse(t, `
apps:
  a: {hosts: [a.example.com], backends: ["127.0.0.1:1"], limits: &l {rate: 10/s, shadow: [rate]}}
  b: {hosts: [b.example.com], backends: ["127.0.0.1:1"], limits: *l}
`)
	if !cfg.Apps["b"].Limits.Shadow.Has("rate") {
		t.Errorf("b's shadow = %q, want [rate]", cfg.Apps["b"].Limits.Shadow)
	}
}

func TestShadowRefused(t *testing.T) {
	const path = "apps.a.limits.shadow"
	tests := []struct{ name, shadow, frag string }{
		{"queue-full", `[rate, queue-full]`, `"queue-full" is never shadowed: the concurrency and queue limits protect levee itself`},
		{"queue-timeout", `[queue-timeout]`, `"queue-timeout" is never shadowed: the concurrency and queue limits`},
		{"shed", `[shed]`, `"shed" is never shadowed`},
		{"client-share", `[client-share]`, `"client-share" is never shadowed`},
		{"backend_limits", `[backend-rate]`, `"backend-rate" is never shadowed: backend_limits protect the app's backends`},
		{"backend queue", `[backend-queue-full]`, `"backend-queue-full" is never shadowed: backend_limits`},
		{"min-rate", `[min-rate]`, `"min-rate" is never shadowed: a slow client`},
		{"request-timeout", `[request-timeout]`, `"request-timeout" is never shadowed`},
		{"framing", `[bad-framing]`, `"bad-framing" is never shadowed: a request levee cannot read unambiguously`},
		{"bad body", `[bad-request-body]`, `"bad-request-body" is never shadowed`},
		{"catalog", `[catalog-busy]`, `"catalog-busy" is never shadowed: the catalog loader`},
		{"conns", `[conns-per-ip]`, `"conns-per-ip" is never shadowed: the connection limits`},
		{"bandwidth", `[bandwidth]`, `"bandwidth" is never shadowed`},
		{"unknown", `[rates]`, `"rates" is not a refusal reason that can be shadowed (want true, or some of: url-length`},
		{"twice", `[rate, rate]`, `"rate" is listed twice`},
		{"a string", `rate`, `want true, false or a list of refusal reasons`},
		{"a mapping", `{rate: true}`, `want true, false or a list of refusal reasons`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := parseErrs(t, appWith(`limits: {shadow: `+tt.shadow+`}`))
			if len(es) != 1 {
				t.Errorf("got %d errors, want 1: %v", len(es), es)
			}
			wantErr(t, es, path, tt.frag)
		})
	}
}

// TestShadowEmptyItem: a null list item is the decoder's error, reported once.
func TestShadowEmptyItem(t *testing.T) {
	es := parseErrs(t, appWith(`limits: {shadow: [rate, ~]}`))
	wantErr(t, es, "apps.a.limits.shadow[1]", "empty list item")
}
