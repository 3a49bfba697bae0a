package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/limitsconf"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/reply"
)

// The rejection reasons of the catalog (SQLite or PostgreSQL), in the
// reply table.
const (
	reasonCatalogBusy        = reply.CatalogBusy
	reasonCatalogUnavailable = reply.CatalogUnavailable
)

// errShadowed skips a stored app that has the name of a YAML app: the
// config file wins.
var errShadowed = errors.New("server: an app of the config file has this name; the config file wins")

// newLazyCatalog makes the server's lazily loaded catalog over st, or nil
// when there is no store.
func (s *Server) newLazyCatalog(st catalog.Store, cfg config.Catalog) *catalog.Lazy[*route] {
	if st == nil {
		return nil
	}
	return catalog.NewLazy(catalog.LazyOptions[*route]{
		Store:       st,
		Compose:     s.composeStored,
		Release:     s.releaseStored,
		MaxApps:     cfg.Cache.MaxApps,
		MaxUnknown:  cfg.Cache.MaxUnknown,
		UnknownTTL:  cfg.Cache.UnknownTTL.D(),
		Concurrency: cfg.Loader.Concurrency,
		Rate:        limitsconf.GCRA(cfg.Loader.Rate, 0),
		MaxWaiters:  cfg.Loader.MaxWaiters,
		Timeout:     cfg.Loader.Timeout.D(),
		Watch:       cfg.Watch.D(),
		Clock:       s.clk,
		Logger:      s.log,
		Metrics:     catalog.NewMetrics(s.metrics.Registry),
	})
}

// routeStored finds a request's route in the catalog, after the
// config file's apps missed. ok false with a zero refusal code: no app
// claims it (404), or the client went away.
func (s *Server) routeStored(ctx context.Context, host, path string) (*route, limits.Refusal, bool) {
	rt, err := s.lazy.Load(ctx, host, path)
	switch {
	case err == nil:
		return rt, limits.Refusal{}, true
	case errors.Is(err, catalog.ErrBusy):
		s.unrouted.Rejected(reasonCatalogBusy)
		return nil, limits.Refusal{Code: http.StatusServiceUnavailable, Reason: reasonCatalogBusy, RetryAfter: s.catalogRetry}, false
	case errors.Is(err, catalog.ErrUnavailable):
		s.unrouted.Rejected(reasonCatalogUnavailable)
		if l, ok := s.errlog.Take(slog.LevelError, observe.EventCatalogLoad, ""); ok {
			l.Log("host", host, "err", err)
		}
		return nil, limits.Refusal{Code: http.StatusServiceUnavailable, Reason: reasonCatalogUnavailable, RetryAfter: s.catalogRetry}, false
	}
	return nil, limits.Refusal{}, false // not found, or ctx ended
}

// composeStored composes an app loaded from the catalog store, as a
// reload composes the config file's apps; the app's state lives until the
// catalog releases every route composed for it (releaseStored).
func (s *Server) composeStored(r catalog.Record) (*route, error) {
	ac, err := config.ParseApp(r.Name, r.Config)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if _, ok := s.cfg.Apps[r.Name]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("app %s: %w", r.Name, errShadowed)
	}
	rt, retired := s.composeApp(r.Name, ac, s.cfg, s.trust, true)
	s.mu.Unlock()
	s.apps.ReleaseConns(retired)
	return rt, nil
}

// releaseStored drops one route of a stored app; the last one retires the
// app to the parked apps (apps.Table.Release).
func (s *Server) releaseStored(rt *route) { s.apps.ReleaseConns(s.apps.Release(rt.app)) }
