// Package urlpath matches request paths against configured prefixes, on
// segment boundaries, the one way levee does it: routes (catalog),
// limits.per_path and limits.priority.paths (limits). A leaf, so that the
// gate does not import the catalog for it.
package urlpath

import "strings"

// HasPrefix reports whether path is under prefix on a segment boundary:
// "/api" holds "/api" and "/api/x", not "/apix".
func HasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}
