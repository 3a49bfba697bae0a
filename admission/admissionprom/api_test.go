package admissionprom_test

import (
	"flag"
	"testing"

	"github.com/leveeproxy/levee/internal/apicheck"
)

var update = flag.Bool("update", false, "rewrite api.txt from the package's exported API")

// TestAPI pins the package's exported API to api.txt, as admission's does:
//
//	go test ./admission/admissionprom -run '^TestAPI$' -update
func TestAPI(t *testing.T) {
	apicheck.Golden(t, "github.com/leveeproxy/levee/admission/admissionprom", "api.txt", *update)
}
