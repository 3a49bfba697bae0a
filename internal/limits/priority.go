package limits

import (
	"slices"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/config"
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

// NewClassifier returns the classifier of a validated limits.priority.
func NewClassifier(p config.Priority) Classifier {
	c := Classifier{def: parseClass(p.Default)}
	for prefix, class := range p.Paths {
		c.paths = append(c.paths, pathClass{prefix, parseClass(class)})
	}
	slices.SortFunc(c.paths, func(a, b pathClass) int { return len(b.prefix) - len(a.prefix) })
	if len(p.Clients) > 0 {
		c.clients = make(map[string]admit.Class, len(p.Clients))
		for key, class := range p.Clients {
			c.clients[key] = parseClass(class)
		}
	}
	return c
}

func parseClass(s string) admit.Class {
	switch s {
	case config.ClassCritical:
		return admit.Critical
	case config.ClassSheddable:
		return admit.Sheddable
	}
	return admit.Default
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
