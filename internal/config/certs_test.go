package config

import (
	"testing"

	"github.com/leveeproxy/levee/internal/testcert"
)

// writeCert writes a throwaway self-signed certificate and key for localhost
// and returns their paths.
func writeCert(t *testing.T) (cert, key string) {
	t.Helper()
	return testcert.Files(t, "localhost")
}
