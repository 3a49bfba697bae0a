package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/admin"
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
)

// noApps is an admin API with nothing serving.
type noApps struct{}

func (noApps) Apps(int) ([]apps.AppSummary, int) { return nil, 0 }
func (noApps) App(string) (apps.AppDetail, bool) { return apps.AppDetail{}, false }
func (noApps) Top(string, string, string) (topk.Report, bool, error) {
	return topk.Report{}, false, nil
}
func (noApps) Instance() admin.Instance { return admin.Instance{} }

// expiringCerts: one certificate expiring in 3 days (its name markup the
// page must show as text), one in 60.
type expiringCerts struct{}

const uiEvilCertName = `<img src=x onerror="document.title='xss'">.example.com`

func (expiringCerts) List(context.Context, int) ([]acme.CertInfo, error) {
	now := time.Now()
	return []acme.CertInfo{
		{Name: uiEvilCertName, Issuer: "Test CA", NotAfter: now.Add(72 * time.Hour), NextRenewal: now.Add(-time.Hour),
			LastError: "urn:ietf:params:acme:error:connection"},
		{Name: "later.example.com", Issuer: "Test CA", NotAfter: now.Add(60 * 24 * time.Hour)},
	}, nil
}
func (expiringCerts) Show(context.Context, string) (acme.CertInfo, error) {
	return acme.CertInfo{}, nil
}
func (expiringCerts) Renew(context.Context, string) error { return nil }

// TestUIDashboardListsExpiringCerts: with tls.acme on, the dashboard
// lists the certificates expiring within 14 days (and not the others),
// names as text, with their last error.
func TestUIDashboardListsExpiringCerts(t *testing.T) {
	if testH2C() {
		t.Skip("the dashboard is the admin listener's (HTTP/1.1); the h2c re-run adds nothing")
	}
	chromium := lookChromium(t)
	done := make(chan struct{})
	srv := httptest.NewServer(admin.Handler(admin.Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:0",
		API: noApps{}, Done: done, Certs: expiringCerts{}}))
	defer srv.Close()
	defer close(done)

	ctx, cancel := context.WithTimeout(context.Background(), uiTestTimeout)
	defer cancel()
	browser, stopBrowser := startChromium(ctx, t, chromium, t.TempDir())
	defer stopBrowser()
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/ui/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	rows := `(() => {
		const s = document.getElementById('certs');
		const trs = document.querySelectorAll('#certs-table tbody tr');
		return s && !s.hidden && trs.length > 0 ? [...trs].map((tr) => tr.innerText).join('\n') : null;
	})()`
	got, err := chromedp.Run(browser, chromedp.Poll[string](rows,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("the certificates section never showed: %v", err)
	}
	if !strings.Contains(got, uiEvilCertName) || !strings.Contains(got, "error:connection") || strings.Contains(got, "later.example.com") {
		t.Fatalf("the section shows:\n%s\nwant the certificate expiring in 3 days (its name as text, its error), not the one in 60", got)
	}
	title, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.title + ' ' + document.getElementsByTagName('img').length`))
	if err != nil || title != "levee 0" {
		t.Fatalf("title and img count %q, %v: the name ran as markup", title, err)
	}
}
