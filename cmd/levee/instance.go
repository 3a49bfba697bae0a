package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/instance"
	"github.com/leveeproxy/levee/internal/server"
)

// takeoverEvery is how often an unexpected instance tries the lock again.
const takeoverEvery = time.Second

// instanceGuard is this process's place among the levees on its config:
// active (it holds the lock) or unexpected (another one does).
type instanceGuard struct {
	path string // the lock file; empty: no lock (the demo)

	mu         sync.Mutex
	lock       *instance.Lock // held; nil while unexpected
	unexpected bool           // as at startup; see role for now
}

// lockInstance takes the instance lock of cfg, whose file is configPath
// (empty: no lock), or adopts inherited, the lock an upgrade handed over
// (nil: none). When another levee holds it, instance.unexpected decides:
// refuse returns the error naming the holder; strict returns an
// unexpected guard.
func lockInstance(cfg *config.Config, configPath string, inherited *os.File, log *slog.Logger) (*instanceGuard, error) {
	if configPath == "" {
		return &instanceGuard{}, nil
	}
	path := cfg.Instance.Lock
	var err error
	if path == "" {
		if path, err = instance.DefaultPath(configPath); err != nil {
			return nil, err
		}
	}
	g := &instanceGuard{path: path}
	var l *instance.Lock
	if inherited != nil {
		// The same lock, handed over: held throughout (instance.Adopt).
		l, err = instance.Adopt(path, inherited)
	} else {
		l, err = instance.TryAcquire(path)
	}
	var held *instance.HeldError
	switch {
	case err == nil:
		g.lock = l
		return g, nil
	case !errors.As(err, &held):
		return nil, err
	case cfg.Instance.Unexpected == config.UnexpectedRefuse:
		return nil, fmt.Errorf("%w; refusing to start (instance.unexpected: refuse)", err)
	}
	g.unexpected = true
	log.Warn("another levee is active on this config: serving as an unexpected instance with strict limits",
		"holder_pid", held.PID, "lock", path, "strict_fraction", fmt.Sprintf("%d%%", cfg.Instance.StrictFraction))
	return g, nil
}

// takeOver waits for the lock while levee serves as an unexpected
// instance; once the active instance has exited (after its drain), this
// one becomes active with its full limits. It returns when ctx ends.
func (g *instanceGuard) takeOver(ctx context.Context, srv *server.Server, log *slog.Logger) {
	l, err := instance.Await(ctx, g.path, clock.Real{}, takeoverEvery)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("instance lock: cannot take it over; staying unexpected", "lock", g.path, "err", err)
		}
		return
	}
	g.mu.Lock()
	g.lock = l
	g.mu.Unlock()
	srv.SetUnexpected(false)
	log.Info("took over the instance lock: now the active instance, with full limits", "lock", g.path)
}

// role is "active" or "unexpected", now.
func (g *instanceGuard) role() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.path != "" && g.lock == nil {
		return "unexpected"
	}
	return "active"
}

// status is the STATUS line levee gives systemd.
func (g *instanceGuard) status() string {
	if g.role() == "unexpected" {
		return "serving as an UNEXPECTED instance with strict limits (another levee holds " + g.path + ")"
	}
	return "serving"
}

// file is the held lock's open file, to hand over (nil: none held).
func (g *instanceGuard) file() *os.File {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lock.File()
}

// claim names this process in the lock file, once an adopted lock's
// upgrade has succeeded.
func (g *instanceGuard) claim() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lock.Claim()
}

// release gives the lock up; serve calls it last, after the drain.
func (g *instanceGuard) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.lock.Release()
	g.lock = nil
}
