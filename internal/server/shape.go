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

// shapeCache keeps the last shape.Checker built, for the next route with
// the same limits: a Checker is immutable, and apps with the default
// limits (most of a large catalog) then share one. Guarded by Server.mu.
type shapeCache struct {
	limits shape.Limits
	check  *shape.Checker
}

func (c *shapeCache) newShapeLimits(l config.Limits) shapeLimits {
	sl := shapeLimits{app: c.newPathShape("", l)}
	for prefix := range l.PerPath {
		sl.perPath = append(sl.perPath, c.newPathShape(prefix, l.ShapeFor(prefix)))
	}
	slices.SortFunc(sl.perPath, func(a, b pathShape) int { return len(b.prefix) - len(a.prefix) })
	return sl
}

func (c *shapeCache) newPathShape(prefix string, l config.Limits) pathShape {
	sl := shape.Limits{
		MaxHeaderBytes: int(l.HeaderBytes),
		MaxHeaderCount: l.HeaderCount,
		MaxURLBytes:    int(l.URLLength),
		MaxQueryValues: l.QueryValues,
		Batch:          shape.Batch{JSONField: l.Batch.JSONField, Max: l.Batch.Max},
	}
	if c.check == nil || c.limits != sl {
		check, err := shape.New(sl)
		if err != nil {
			panic(fmt.Sprintf("server: a validated config has invalid shape limits: %v", err))
		}
		c.limits, c.check = sl, check
	}
	return pathShape{prefix: prefix, body: int64(l.Body), check: c.check}
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
