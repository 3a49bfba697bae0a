package admission_test

import (
	"flag"
	"os"
	"testing"

	"github.com/leveeproxy/levee/internal/apicheck"
)

var update = flag.Bool("update", false, "rewrite api.txt from the package's exported API")

// TestAPI pins the package's exported API to api.txt, so a change to the
// public surface is deliberate:
// regenerate the file with
//
//	go test ./admission -run '^TestAPI$' -update
//
// and let the diff of api.txt show, in review, what a user's code sees
// change (semver: additions are minor, anything else is major).
func TestAPI(t *testing.T) {
	got, err := apicheck.API("github.com/leveeproxy/levee/admission")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("api.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("api.txt")
	if err != nil {
		t.Fatalf("%v (generate it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("the exported API differs from api.txt; if the change is meant, run\n"+
			"\tgo test ./admission -run '^TestAPI$' -update\n\ngot:\n%s\nwant:\n%s", got, want)
	}
}
