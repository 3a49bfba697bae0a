package server

import (
	"fmt"
	"slices"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/shape"
)

// pathShape is the request-shape limits of requests under one path
// prefix: limits.body and the checker of the rest.
type pathShape struct {
	prefix string
	body   int64
	check  *shape.Checker
}

// shapeLimits are a route's shape limits: the app's, and limits.per_path
// overrides, longest prefix first.
type shapeLimits struct {
	app     pathShape
	perPath []pathShape
}

func newShapeLimits(l config.Limits) shapeLimits {
	sl := shapeLimits{app: newPathShape("", l)}
	for prefix := range l.PerPath {
		sl.perPath = append(sl.perPath, newPathShape(prefix, l.ShapeFor(prefix)))
	}
	slices.SortFunc(sl.perPath, func(a, b pathShape) int { return len(b.prefix) - len(a.prefix) })
	return sl
}

func newPathShape(prefix string, l config.Limits) pathShape {
	c, err := shape.New(shape.Limits{
		MaxHeaderBytes: int(l.HeaderBytes),
		MaxHeaderCount: l.HeaderCount,
		MaxURLBytes:    int(l.URLLength),
		MaxQueryValues: l.QueryValues,
		Batch:          shape.Batch{JSONField: l.Batch.JSONField, Max: l.Batch.Max},
	})
	if err != nil {
		panic(fmt.Sprintf("server: a validated config has invalid shape limits: %v", err))
	}
	return pathShape{prefix: prefix, body: int64(l.Body), check: c}
}

// forPath returns the shape limits of a request for path: the longest
// limits.per_path prefix holding it, else the app's. Without per-path
// limits it costs nothing.
func (sl *shapeLimits) forPath(path string) *pathShape {
	for i := range sl.perPath {
		if catalog.PathHasPrefix(path, sl.perPath[i].prefix) {
			return &sl.perPath[i]
		}
	}
	return &sl.app
}
