// Package layering_test keeps the request path's packages from depending on
// the admin side or the command: the data path must build, run and be
// tested without them, and an admin change must never slow a request.
package layering_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/leveeproxy/levee"

// dataPath are the packages a request passes through.
var dataPath = []string{
	"admission", "internal/admit", "internal/admit/limit", "internal/balance", "internal/catalog", "internal/chunked", "internal/catalog/sqlitestore", "internal/catalog/pgstore", "internal/clock",
	"internal/cluster", "internal/config", "internal/forward", "internal/framing", "internal/h2guard", "internal/health", "internal/limits", "internal/membuf", "internal/netlimit", "internal/observe", "internal/overload", "internal/protect", "internal/ratelimit", "internal/reply", "internal/server", "internal/shape",
}

// forbidden are what the data path must never import.
var forbidden = []string{"internal/admin", "internal/demo", "internal/redistest", "internal/pgtest", "internal/catalog/storetest", "cmd/"}

func TestDataPathDoesNotImportAdminOrCmd(t *testing.T) {
	for _, pkg := range dataPath {
		for _, dep := range listDeps(t, pkg) {
			for _, bad := range forbidden {
				if strings.HasPrefix(dep, module+"/"+bad) {
					t.Errorf("%s imports %s: the request path must not depend on %s", pkg, dep, bad)
				}
			}
		}
	}
}

// testOnly are modules only tests use: chromedp drives the dashboard's
// browser test, toxiproxy (and its logger, zerolog) the fault matrix.
var testOnly = []string{"github.com/chromedp/", "github.com/Shopify/toxiproxy/", "github.com/rs/zerolog"}

// TestBinaryDoesNotLinkTestOnlyModules: the levee binary carries none of
// testOnly.
func TestBinaryDoesNotLinkTestOnlyModules(t *testing.T) {
	for _, dep := range listDeps(t, "cmd/levee") {
		for _, m := range testOnly {
			if strings.HasPrefix(dep, m) {
				t.Errorf("cmd/levee links %s, a test-only dependency", dep)
			}
		}
	}
}

// listDeps is every package pkg (a path in the module) builds with.
func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list %s listed %d packages; the check would prove nothing", pkg, len(deps))
	}
	return deps
}
