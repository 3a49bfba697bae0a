// Package limitsconf composes the gate's parts (internal/limits) from
// validated config: the one translation of a `limits:` section into the
// plain values the gate takes, used by the proxy (internal/server) and the
// admission library alike. It is apart from limits so that the gate
// imports no config: its inputs are rates, counts and classes, whoever
// made them.
package limitsconf

import (
	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/admit/limit"
	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
	"github.com/leveeproxy/levee/internal/topk"
)

// GCRA is a configured rate and burst (0: derived) as a GCRA limit; the
// zero Limit when the rate is off.
func GCRA(r config.Rate, burst int) ratelimit.Limit {
	if r == (config.Rate{}) {
		return ratelimit.Limit{}
	}
	return ratelimit.Limit{Interval: r.Interval(), Burst: config.EffectiveBurst(r, burst)}
}

// AdmitLimits is the concurrency limit and queue of validated limits.
func AdmitLimits(l config.Limits) admit.Limits {
	return admit.Limits{
		Concurrency: l.Concurrency.Limit,
		MaxLen:      l.Queue.MaxLen,
		MaxWait:     l.Queue.MaxWait.D(),
		Target:      l.Queue.Target.D(),
		Interval:    l.Queue.Interval.D(),
	}
}

// Gradient is the configuration of an adaptive (gradient) concurrency
// limit c; meaningful when c.Adaptive is gradient.
func Gradient(c config.Concurrency) limit.Config { return limit.Config{Min: c.Min, Max: c.Max} }

// Classifier is the classifier of a validated limits.priority.
func Classifier(p config.Priority) limits.Classifier {
	return limits.NewClassifier(class(p.Default), classes(p.Paths), classes(p.Clients))
}

func classes(m map[string]string) map[string]admit.Class {
	out := make(map[string]admit.Class, len(m))
	for k, c := range m {
		out[k] = class(c)
	}
	return out
}

func class(s string) admit.Class {
	switch s {
	case config.ClassCritical:
		return admit.Critical
	case config.ClassSheddable:
		return admit.Sheddable
	}
	return admit.Default
}

// Shapes are the shape limits of validated limits l, the app's and
// limits.per_path's, with checkers from c.
func Shapes(c *limits.ShapeCache, l config.Limits) limits.Shapes {
	var perPath map[string]limits.ShapeLimits
	if len(l.PerPath) > 0 {
		perPath = make(map[string]limits.ShapeLimits, len(l.PerPath))
		for prefix := range l.PerPath {
			perPath[prefix] = shapeLimits(l.ShapeFor(prefix))
		}
	}
	return c.NewShapes(shapeLimits(l), perPath)
}

func shapeLimits(l config.Limits) limits.ShapeLimits {
	return limits.ShapeLimits{Body: int64(l.Body), Shape: shape.Limits{
		MaxHeaderBytes: int(l.HeaderBytes),
		MaxHeaderCount: l.HeaderCount,
		MaxURLBytes:    int(l.URLLength),
		MaxQueryValues: l.QueryValues,
		Batch:          shape.Batch{JSONField: l.Batch.JSONField, Max: l.Batch.Max},
	}}
}

// Handler is a net/http gate of validated limits l (the admission
// library's), on clk (nil: the real clock): name names its
// RateLimit-Policy, as an app's name does in the proxy; bodyErr is as for
// limits.NewHandler. Its rate limits keep their state in process.
func Handler(name string, l config.Limits, clk clock.Clock, bodyErr func(reason string) error) *limits.Handler {
	if clk == nil {
		clk = clock.Real{}
	}
	lim := AdmitLimits(l)
	limiter := admit.NewLimiter(lim, clk)
	var shapes limits.ShapeCache
	g := &limits.Gate{
		AppRate:    limits.NewRule(name, reply.Rate, GCRA(l.Rate, l.Burst)),
		ClientRate: limits.NewRule(name+"-client", reply.ClientRate, GCRA(l.Client.Rate, l.Client.Burst)),
		ClientKey:  clientkey.New(l.Client.Key),
		Classes:    Classifier(l.Priority),
		FairShare:  l.FairShare,
		Shapes:     Shapes(&shapes, l),
		Shadow:     limits.NewShadowSet(l.Shadow),
		Limiter:    limiter,
		Clock:      clk,
	}
	if l.Concurrency.Adaptive == config.AdaptiveGradient {
		g.Adaptive = limits.NewAdaptive(Gradient(l.Concurrency), lim, limiter, 1)
	}
	if g.AppRate != nil {
		g.AppRate.Store = limits.NewStore(1)
	}
	if g.ClientRate != nil {
		g.ClientRate.Store = limits.NewStore(l.Client.MaxKeys)
	}
	return limits.NewHandler(g, topk.NewClientTop(l.Client.TopK), bodyErr)
}
