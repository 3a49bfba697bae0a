package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/testcert"
)

// TestCatalogImportStoresTheCertificate: the import reads an app's
// certificate and key files into the catalog (PEM), so that every instance
// reading the catalog has them; a certificate that does not load is refused
// and nothing is stored.
func TestCatalogImportStoresTheCertificate(t *testing.T) {
	certFile, keyFile := testcert.Files(t, "secure.test")
	dir := t.TempDir()
	db := filepath.Join(dir, "catalog.db")
	apps := filepath.Join(dir, "apps.yaml")
	write := func(body string) {
		if err := os.WriteFile(apps, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("apps:\n  secure: {hosts: [secure.test], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}\n", certFile, keyFile))
	if code, _, errOut := runLevee(t, "catalog", "import", "--db", db, apps); code != 0 {
		t.Fatalf("import: %d %s", code, errOut)
	}
	cert, _ := os.ReadFile(certFile)
	code, out, errOut := runLevee(t, "catalog", "export", "--db", db)
	if code != 0 || !strings.Contains(out, `"cert_pem"`) || strings.Contains(out, certFile) ||
		!strings.Contains(out, strings.ReplaceAll(strings.TrimSpace(string(cert))[:40], "\n", `\n`)) {
		t.Fatalf("export: %d %s %s; want the certificate's PEM, not its path", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(fmt.Sprintf("apps:\n  broken: {hosts: [broken.test], backends: ['127.0.0.1:9'], tls: {cert: %s, key: %s}}\n", bad, keyFile))
	if code, _, errOut := runLevee(t, "catalog", "import", "--db", db, apps); code != 1 || !strings.Contains(errOut, "apps.broken.tls: cannot load certificate") {
		t.Fatalf("import of a bad certificate: %d %s; want 1 naming apps.broken.tls", code, errOut)
	}
	if _, out, _ := runLevee(t, "catalog", "stats", "--db", db); !strings.Contains(out, "apps            1") {
		t.Fatalf("after the refused import: %s; want 1 app", out)
	}
}
