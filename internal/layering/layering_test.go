// Package layering_test states levee's package boundaries, each with its
// reason, and fails the build when one is crossed: the request path does
// not depend on the admin side or the command; the public admission
// library does not link the proxy; the gate (internal/limits) imports only
// the steps it runs; and only the engine adapters and the upstream legs
// speak fasthttp. (In the manner of tailscale's tstest/deptest.)
package layering_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leveeproxy/levee"

// dataPath are the packages a request passes through.
var dataPath = []string{
	"admission", "admission/admissionprom", "internal/admit", "internal/apps", "internal/admit/limit", "internal/balance", "internal/catalog", "internal/chunked", "internal/catalog/sqlitestore", "internal/catalog/pgstore", "internal/clientkey", "internal/clock",
	"internal/cluster", "internal/config", "internal/forward", "internal/framing", "internal/h2", "internal/h2guard", "internal/health", "internal/limits", "internal/limitsconf", "internal/membuf", "internal/netlimit", "internal/observe", "internal/overload", "internal/protect", "internal/ratelimit", "internal/reply", "internal/reply/fastreply", "internal/server", "internal/shape", "internal/sni", "internal/sockio", "internal/topk", "internal/trace", "internal/urlpath",
}

// forbidden are what the data path must never import.
var forbidden = []string{"internal/admin", "internal/demo", "internal/redistest", "internal/pgtest", "internal/testnet", "internal/catalog/storetest", "cmd/"}

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

const (
	fasthttp   = "github.com/valyala/fasthttp"
	prometheus = "github.com/prometheus/"
)

// unlinked are what a package must not depend on, even indirectly, and why.
var unlinked = []struct {
	pkg string
	bad []string // import paths, or prefixes ending in "/"
	why string
}{
	{"admission", []string{fasthttp, prometheus, module + "/internal/forward", module + "/internal/server",
		module + "/internal/observe", module + "/internal/catalog"},
		"a service that imports the admission library links the scheduler and the gate, not the proxy: " +
			"no fasthttp, no forwarding code, no server, and no Prometheus unless it asks for admissionprom"},
	{"admission/admissionprom", []string{fasthttp, module + "/internal/forward", module + "/internal/server"},
		"the Prometheus face of the library links Prometheus, and still not the proxy"},
	{"internal/apps", []string{module + "/internal/server", module + "/internal/admin"},
		"apps owns the app state that outlives reloads: the server composes requests' routes from it and " +
			"the admin API reads its views, never the other way round (and, like every package but the " +
			"engines and the legs, it imports no fasthttp: TestOnlyEnginesAndLegsImportFasthttp)"},
	{"internal/protect", []string{module + "/internal/observe", prometheus},
		"protect needs the Space-Saving sketch (topk), not the metrics and their Prometheus registry"},
}

func TestLibraryDoesNotLinkTheProxy(t *testing.T) {
	for _, u := range unlinked {
		for _, dep := range listDeps(t, u.pkg) {
			for _, bad := range u.bad {
				if dep == bad || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) ||
					strings.HasPrefix(dep, bad+"/") {
					t.Errorf("%s depends on %s: %s", u.pkg, dep, u.why)
				}
			}
		}
	}
}

// limitsImports are the only packages of the module the gate
// (internal/limits) imports, each with its reason. It imports no module
// outside the standard library.
var limitsImports = map[string]string{
	"internal/admit":       "the concurrency limit, its queue and its Rejection",
	"internal/admit/limit": "the adaptive algorithm behind limits.concurrency: {adaptive: gradient}",
	"internal/ratelimit":   "the GCRA buckets of limits.rate and limits.client.rate",
	"internal/shape":       "the request-shape and batch checks",
	"internal/reply":       "the one table of refusals, and its net/http writer for the admission middleware",
	"internal/trace":       "the request's stage marks",
	"internal/clock":       "injected time",
	"internal/clientkey":   "who the client is (limits.client.key), read as every other step reads it",
	"internal/topk":        "the heaviest clients of the admission middleware (limits.client.top_k)",
	"internal/urlpath":     "limits.per_path and priority paths match as routes do",
}

func TestGateImportsOnlyTheStepsItRuns(t *testing.T) {
	imported := map[string]bool{}
	for _, imp := range listImports(t, "internal/limits") {
		rel, ok := strings.CutPrefix(imp, module+"/")
		if ok {
			imported[rel] = true
			if _, allowed := limitsImports[rel]; !allowed {
				t.Errorf("internal/limits imports %s: the gate imports only %v, so that the proxy's "+
					"forwarding, metrics, catalog and config, and fasthttp, stay out of it: its owners "+
					"(internal/limitsconf for config) hand it plain values", rel, keys(limitsImports))
			}
			continue
		}
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("internal/limits imports %s: the gate imports no module outside the standard library", imp)
		}
	}
	// The list is the layout, not a ceiling: a package the gate stopped
	// importing leaves it, so that the reasons above stay true.
	for rel := range limitsImports {
		if !imported[rel] {
			t.Errorf("limitsImports allows %s, which internal/limits no longer imports: drop it from the list", rel)
		}
	}
}

// TestRepliesAreTheTables: every refusal's answer is a row of package
// reply's one table, so that a reason is answered alike on both engines
// and its status, Retry-After and body are read in one place. No package
// but reply writes a reply.Reply literal (its own rows); the others name a
// reason (reply.For) or keep a pointer to a row.
func TestRepliesAreTheTables(t *testing.T) {
	files := 0
	for line := range strings.Lines(listAll(t, "{{.Dir}} {{.ImportPath}}")) {
		dir, pkg, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pkg == module+"/internal/reply" {
			continue
		}
		names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.CompositeLit); ok {
					if sel, ok := lit.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reply" {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "reply" {
							t.Errorf("%s writes a reply.Reply of its own: add a row to internal/reply's table instead", name)
						}
					}
				}
				return true
			})
		}
	}
	if files == 0 {
		t.Fatal("no file read: the check would prove nothing")
	}
}

// fasthttpUsers are the only packages that may import fasthttp, and why.
// Every other package works on net/http types or on engine-neutral values,
// so that both engines run one implementation of each step and the
// admission library links no fasthttp.
var fasthttpUsers = map[string]string{
	"internal/server":          "the engine adapters: the HTTP/1.x listener's engine and its exchange",
	"internal/forward":         "the upstream legs: fasthttp.HostClient to the backends (and legs below it)",
	"internal/framing":         "the HTTP/1.x framing check runs on the fasthttp request before routing",
	"internal/reply/fastreply": "the fasthttp writer of the one reply table",
	"bench/bareproxy":          "the bare fasthttp proxy the benchmarks compare levee with",
}

func TestOnlyEnginesAndLegsImportFasthttp(t *testing.T) {
	users := 0
	for line := range strings.Lines(listAll(t, "{{.ImportPath}} {{join .Imports \" \"}}")) {
		f := strings.Fields(line)
		if len(f) == 0 || !slices.Contains(f[1:], fasthttp) {
			continue
		}
		users++
		rel := strings.TrimPrefix(f[0], module+"/")
		if !allowedUnder(fasthttpUsers, rel) {
			t.Errorf("%s imports fasthttp: only %v may (engine adapters, framing, the reply writer, "+
				"the upstream legs); the rest take net/http or engine-neutral values", rel, keys(fasthttpUsers))
		}
	}
	if users == 0 {
		t.Fatal("no package imports fasthttp: the check would prove nothing")
	}
}

// allowedUnder reports whether pkg is one of allowed's keys or below one.
func allowedUnder(allowed map[string]string, pkg string) bool {
	for a := range allowed {
		if pkg == a || strings.HasPrefix(pkg, a+"/") {
			return true
		}
	}
	return false
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

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

// listAll is format (a go list template) of every package of the module,
// a line each.
func listAll(t *testing.T, format string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return string(out)
}

// listImports is what pkg (a path in the module) imports directly, tests
// not included.
func listImports(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", module+"/"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	imps := strings.Fields(string(out))
	if len(imps) == 0 {
		t.Fatalf("go list %s listed no imports; the check would prove nothing", pkg)
	}
	return imps
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

// TestArchitectureListsEveryPackage: docs/architecture.md's package list
// is the layout, so that a package added or moved without a line there
// fails here, not in a reader's head.
func TestArchitectureListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pkg := range strings.Fields(listAll(t, "{{.ImportPath}}")) {
		rel := strings.TrimPrefix(pkg, module+"/")
		n++
		if !strings.Contains(string(doc), "`"+rel+"`") {
			t.Errorf("docs/architecture.md does not name %s in its package list", rel)
		}
	}
	if n < 10 {
		t.Fatalf("go list listed %d packages; the check would prove nothing", n)
	}
}
