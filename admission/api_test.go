package admission_test

import (
	"flag"
	"testing"

	"github.com/leveeproxy/levee/internal/apicheck"
)

var update = flag.Bool("update", false, "rewrite api.txt from the package's exported API")

// TestAPI pins the package's exported API to api.txt, so a change to the
// public surface is deliberate: regenerate the file with
//
//	go test ./admission -run '^TestAPI$' -update
//
// and let the diff of api.txt show, in review, what a user's code sees
// change (semver: additions are minor, anything else is major).
func TestAPI(t *testing.T) {
	apicheck.Golden(t, "github.com/leveeproxy/levee/admission", "api.txt", *update)
}
