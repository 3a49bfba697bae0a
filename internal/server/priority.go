package server

import (
	"slices"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// classifier assigns a request's priority class from the config: the
// longest matching path prefix, else the client's rule, else the default.
// Never from a request header levee was not told to trust.
type classifier struct {
	def     admit.Class
	paths   []pathClass // longest prefix first
	clients map[string]admit.Class
}

type pathClass struct {
	prefix string
	class  admit.Class
}

func newClassifier(p config.Priority) classifier {
	c := classifier{def: parseClass(p.Default)}
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

// class returns the class of a request for path from client.
func (c *classifier) class(path, client string) admit.Class {
	for _, pc := range c.paths {
		if catalog.PathHasPrefix(path, pc.prefix) {
			return pc.class
		}
	}
	if cl, ok := c.clients[client]; ok {
		return cl
	}
	return c.def
}

// needsClient reports whether the classifier looks at the client key.
func (c *classifier) needsClient() bool { return len(c.clients) > 0 }

// ticketSlot releases a slot taken with a client ticket.
type ticketSlot struct {
	l *admit.Limiter
	t admit.Ticket
}

func (s *ticketSlot) Release() { s.l.ReleaseFor(s.t) }
