//go:build !unix

package instance

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("instance: lock held")

// lockNB does not lock: without flock (Windows) levee cannot tell a
// second instance, and docs/deploy.md says so.
func lockNB(*os.File) error { return nil }

func writableDir(d string) bool {
	st, err := os.Stat(d)
	return err == nil && st.IsDir()
}
