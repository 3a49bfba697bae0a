package limits

import (
	"maps"
	"slices"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/urlpath"
)

// Classifier assigns a request's priority class from limits.priority: the
// longest matching path prefix, else the client's rule, else the default.
// Never from a request header levee was not told to trust. Read-only once
// made, so safe for concurrent use.
type Classifier struct {
	def     admit.Class
	paths   []pathClass // longest prefix first
	clients map[string]admit.Class
}

type pathClass struct {
	prefix string
	class  admit.Class
}

// NewClassifier returns the classifier of limits.priority: def, and the
// classes of path prefixes and of client keys. It keeps the maps' entries,
// not the maps.
func NewClassifier(def admit.Class, paths, clients map[string]admit.Class) Classifier {
	c := Classifier{def: def}
	for prefix, class := range paths {
		c.paths = append(c.paths, pathClass{prefix, class})
	}
	slices.SortFunc(c.paths, func(a, b pathClass) int { return len(b.prefix) - len(a.prefix) })
	if len(clients) > 0 {
		c.clients = maps.Clone(clients)
	}
	return c
}

// Class returns the class of a request for path from client.
func (c *Classifier) Class(path, client string) admit.Class {
	for _, pc := range c.paths {
		if urlpath.HasPrefix(path, pc.prefix) {
			return pc.class
		}
	}
	if cl, ok := c.clients[client]; ok {
		return cl
	}
	return c.def
}

// NeedsClient reports whether the classifier looks at the client key.
func (c *Classifier) NeedsClient() bool { return len(c.clients) > 0 }
