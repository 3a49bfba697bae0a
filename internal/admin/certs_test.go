package admin

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeCerts holds two certificates: soon.example.com expiring in 3 days,
// late.example.com in 60.
type fakeCerts struct{ renewed *[]string }

func (fakeCerts) List(context.Context, int) ([]acme.CertInfo, error) {
	now := time.Now()
	return []acme.CertInfo{
		{Name: "soon.example.com", Issuer: "Test CA", NotAfter: now.Add(72 * time.Hour)},
		{Name: "late.example.com", Issuer: "Test CA", NotAfter: now.Add(60 * 24 * time.Hour)},
	}, nil
}

func (f fakeCerts) Show(ctx context.Context, name string) (acme.CertInfo, error) {
	list, _ := f.List(ctx, 0)
	for _, ci := range list {
		if ci.Name == name {
			return ci, nil
		}
	}
	return acme.CertInfo{}, fs.ErrNotExist
}

func (f fakeCerts) Renew(_ context.Context, name string) error {
	if name != "soon.example.com" {
		return acme.ErrNotEligible
	}
	*f.renewed = append(*f.renewed, name)
	return nil
}

func TestCertsEndpoints(t *testing.T) {
	var renewed []string
	h := Handler(Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:9901", Token: testToken,
		Certs: fakeCerts{renewed: &renewed}})
	do := func(method, path, token string) (int, string) {
		req := httptest.NewRequest(method, "http://127.0.0.1:9901"+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body := do("GET", "/api/certs?expiring=336h", "")
	var got struct{ Certs []acme.CertInfo }
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got.Certs) != 1 || got.Certs[0].Name != "soon.example.com" {
		t.Fatalf("expiring within 14 days: %d %s", code, body)
	}
	if code, body := do("GET", "/api/certs", ""); code != 200 || !strings.Contains(body, "late.example.com") {
		t.Fatalf("all: %d %s", code, body)
	}
	if code, _ := do("GET", "/api/certs?expiring=soon", ""); code != http.StatusBadRequest {
		t.Fatalf("bad expiring: %d", code)
	}
	if code, _ := do("GET", "/api/certs/nobody.example.com", ""); code != http.StatusNotFound {
		t.Fatalf("unknown name: %d", code)
	}
	if code, _ := do("POST", "/api/certs/soon.example.com/renew", ""); code != http.StatusUnauthorized {
		t.Fatalf("renew without the token: %d", code)
	}
	if code, _ := do("POST", "/api/certs/nobody.example.com/renew", testToken); code != http.StatusNotFound {
		t.Fatalf("renew of an ineligible name: %d", code)
	}
	if code, body := do("POST", "/api/certs/soon.example.com/renew", testToken); code != 200 || len(renewed) != 1 {
		t.Fatalf("renew: %d %s, renewed %v", code, body, renewed)
	}
}

// Without tls.acme, GET /api/certs says so (the dashboard asks: a 404
// would be an error in its console); the other endpoints are 404.
func TestCertsOff(t *testing.T) {
	h := Handler(Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:9901", API: staticAPI{}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9901/api/certs", nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"acme":false,"certs":[]}` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9901/api/certs/a.example.com", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("show: %d", rec.Code)
	}
}
