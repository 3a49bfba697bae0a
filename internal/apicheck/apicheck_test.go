package apicheck

import (
	"strings"
	"testing"
)

func TestAPIOfItself(t *testing.T) {
	got, err := API("github.com/leveeproxy/levee/internal/apicheck")
	if err != nil {
		t.Fatal(err)
	}
	want := "func API(pkg string) (string, error)\nfunc Describe(p *types.Package) string\n" +
		"func Golden(t testing.TB, pkg string, golden string, update bool)\n"
	if got != want {
		t.Errorf("API =\n%s\nwant\n%s", got, want)
	}
	if _, err := API("github.com/leveeproxy/levee/no/such/package"); err == nil || !strings.Contains(err.Error(), "apicheck") {
		t.Errorf("API of a missing package: err = %v", err)
	}
}
