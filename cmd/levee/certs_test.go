package main

import (
	"bytes"
	"context"
	"io/fs"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/admin"
)

type oneCert struct{}

var oneCertInfo = acme.CertInfo{Name: "shop.example.com", Issuer: "Pebble Intermediate CA",
	NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC),
	NextRenewal: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), LastError: "urn:ietf:params:acme:error:connection"}

func (oneCert) List(context.Context, int) ([]acme.CertInfo, error) {
	return []acme.CertInfo{oneCertInfo}, nil
}
func (oneCert) Show(_ context.Context, name string) (acme.CertInfo, error) {
	if name != oneCertInfo.Name {
		return acme.CertInfo{}, fs.ErrNotExist
	}
	return oneCertInfo, nil
}
func (oneCert) Renew(context.Context, string) error { return acme.ErrNotEligible }

// levee certs list and show print each certificate's name, issuer,
// expiry, next renewal and last error; an unknown name exits 1.
func TestCertsCommand(t *testing.T) {
	srv := httptest.NewServer(admin.Handler(admin.Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:0",
		Certs: oneCert{}}))
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := certsCmd(context.Background(), append(args, "--admin", srv.URL), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, _ := run("list")
	for _, want := range []string{"NAME", "shop.example.com", "Pebble Intermediate CA", "2026-04-01T00:00:00Z",
		"2026-03-02T00:00:00Z", "error:connection"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("list: exit %d, no %q in\n%s", code, want, out)
		}
	}
	if code, out, _ := run("show", "shop.example.com"); code != 0 || !strings.Contains(out, "next renewal:  2026-03-02") {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
	if code, _, errs := run("show", "nobody.example.com"); code != 1 || !strings.Contains(errs, "no certificate") {
		t.Fatalf("show of an unknown name: exit %d %s", code, errs)
	}
	if code, _, errs := run("renew", "nobody.example.com"); code != 1 || !strings.Contains(errs, "no app claims") {
		t.Fatalf("renew of an ineligible name: exit %d %s", code, errs)
	}
	if code, _, _ := run("frobnicate"); code != exitUsage {
		t.Fatalf("unknown subcommand: exit %d", code)
	}
}
