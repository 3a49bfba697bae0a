package limits

import (
	"fmt"
	"slices"

	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/urlpath"
)

// PathShape is the request-shape limits of requests under one path
// prefix: limits.body and the checker of the rest.
type PathShape struct {
	Prefix string
	Body   int64
	Check  *shape.Checker
}

// Shapes are a gate's shape limits: the app's, and limits.per_path
// overrides, longest prefix first.
type Shapes struct {
	App     PathShape
	PerPath []PathShape
}

// ShapeCache keeps the last shape.Checker built, for the next gate with
// the same limits: a Checker is immutable, and apps with the default
// limits (most of a large catalog) then share one. Not safe for
// concurrent use: its owner serialises the calls (the proxy under its
// config lock).
type ShapeCache struct {
	limits shape.Limits
	check  *shape.Checker
}

// ShapeLimits are the validated request-shape limits under one path
// prefix: limits.body and the rest.
type ShapeLimits struct {
	Body  int64
	Shape shape.Limits
}

// NewShapes returns a gate's shape limits: the app's, and its
// limits.per_path overrides by prefix.
func (c *ShapeCache) NewShapes(app ShapeLimits, perPath map[string]ShapeLimits) Shapes {
	sl := Shapes{App: c.newPathShape("", app)}
	for prefix, l := range perPath {
		sl.PerPath = append(sl.PerPath, c.newPathShape(prefix, l))
	}
	slices.SortFunc(sl.PerPath, func(a, b PathShape) int { return len(b.Prefix) - len(a.Prefix) })
	return sl
}

func (c *ShapeCache) newPathShape(prefix string, l ShapeLimits) PathShape {
	if c.check == nil || c.limits != l.Shape {
		check, err := shape.New(l.Shape)
		if err != nil {
			panic(fmt.Sprintf("limits: a validated config has invalid shape limits: %v", err))
		}
		c.limits, c.check = l.Shape, check
	}
	return PathShape{Prefix: prefix, Body: l.Body, Check: c.check}
}

// ForPath returns the shape limits of a request for path: the longest
// limits.per_path prefix holding it, else the app's. Without per-path
// limits it costs nothing.
func (sl *Shapes) ForPath(path string) *PathShape {
	for i := range sl.PerPath {
		if urlpath.HasPrefix(path, sl.PerPath[i].Prefix) {
			return &sl.PerPath[i]
		}
	}
	return &sl.App
}
