package shape

import (
	"os/exec"
	"strings"
	"testing"
)

// The package is engine-neutral: both HTTP engines call it, so it must
// import neither, nor anything of levee's.
func TestNoEngineImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list listed %d packages; the check would prove nothing", len(deps))
	}
	for _, dep := range deps {
		if dep == "net/http" || strings.Contains(dep, "fasthttp") ||
			(strings.HasPrefix(dep, "github.com/leveeproxy/levee/") && !strings.HasSuffix(dep, "/internal/shape")) {
			t.Errorf("shape imports %s", dep)
		}
	}
}
